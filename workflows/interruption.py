"""Interrupting a conversation's turn: what stops, what finishes, and what each call is told.

An interrupt (the `interrupt` update) stops the working turn where it is:

- a model call in flight is cancelled, and the turn ends without its reply;
- the calls of the reply that have not started get "Not run: interrupted by the user.";
- read-only calls in flight are cancelled, and their results say so;
- a call that changes data and has started is left to finish, and its result and its effect are
  recorded as usual (a call that changes data and still waits for its approval has not started:
  it is not run);
- a code-mode script (run_code, which changes data) is left to end, and stops where it is: its
  calls in flight end as above, and no leg of it runs after the interrupt (workflows/code_mode.py).

The transcript stays valid: every call of the reply gets a result, in call order. Nothing is
compensated here (workflows/conversation.py says what an ending conversation undoes).
Deterministic code only: tasks are cancelled, nothing is timed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .outcomes import Outcome
from .transcript import ToolCall

T = TypeVar("T")

NOT_RUN = "Not run: interrupted by the user."


def cancelled_text(tool: str) -> str:
    return f"Error: {tool} was cancelled: the user interrupted the turn while it ran."


@dataclass
class _Call:
    call: ToolCall
    task: asyncio.Task[Outcome]
    side_effects: bool
    started: bool = False


class Interruption:
    """The turn's stoppable work, and whether an interrupt asked to stop it."""

    def __init__(self) -> None:
        self.requested = False
        self._model_call: asyncio.Task[Any] | None = None
        self._calls: dict[str, _Call] = {}

    def request(self) -> None:
        """Stop the turn: cancel the model call in flight and every call that may stop."""
        self.requested = True
        if self._model_call is not None:
            self._model_call.cancel()
        for entry in self._calls.values():
            if not entry.side_effects or not entry.started:
                entry.task.cancel()

    def reset(self) -> None:
        """A new turn starts: nothing is interrupted."""
        self.requested = False

    async def model_call(self, call: Coroutine[Any, Any, T]) -> T | None:
        """The model's reply, or None when an interrupt cancelled the call."""
        if self.requested:
            call.close()
            return None
        task = asyncio.ensure_future(call)
        self._model_call = task
        try:
            return await task
        except asyncio.CancelledError:
            if self.requested and task.done():
                return None
            raise  # the run itself is cancelled
        finally:
            self._model_call = None

    def started(self, call_id: str) -> None:
        """A call's activity starts: one that changes data is left to finish from now on."""
        entry = self._calls.get(call_id)
        if entry is not None:
            entry.started = True

    async def run_calls(
        self, calls: Sequence[tuple[ToolCall, Awaitable[Outcome], bool]]
    ) -> list[Outcome]:
        """Run a batch of calls (call, its run, whether it changes data) concurrently; each
        interrupted one gets the outcome that says so."""
        entries = [_Call(call, asyncio.ensure_future(run), effects) for call, run, effects in calls]
        self._calls.update({entry.call.id: entry for entry in entries})
        if self.requested:
            self.request()  # an interrupt that came while this batch was being set up
        try:
            done = await asyncio.gather(*(e.task for e in entries), return_exceptions=True)
        finally:
            for entry in entries:
                self._calls.pop(entry.call.id, None)
        outcomes: list[Outcome] = []
        for entry, outcome in zip(entries, done, strict=True):
            if isinstance(outcome, Outcome):
                outcomes.append(outcome)
            elif isinstance(outcome, asyncio.CancelledError) and self.requested:
                outcomes.append(
                    Outcome.error(entry.call, cancelled_text(entry.call.name))
                    if entry.started
                    else Outcome.not_run(entry.call, NOT_RUN)
                )
            else:
                raise outcome
        return outcomes
