"""Callback tools: tools whose body runs where the user is (a browser, a laptop, a device on a
private network), not on a worker (docs/tools.md#callback-tools).

At a call to one the run publishes the call (the `status` query's `pending_callbacks`, the event
stream's `callback_requested`, the Web UI's current details) and waits, spending nothing, for a
client to answer it by the `answer_callback` update, at most the tool's `timeout_seconds`. The
answer is checked against the tool's declared result schema in the update's validator, so a wrong
one is refused to its sender with the reason and the call keeps waiting; a call answered already
(or timed out, or never asked) refuses another answer. An unanswered call goes to the model as
an error that says it timed out, and the run goes on. The call passes the run's approval policy
before it is published, like any call, and its outcome is recorded, bounded and paired like any.
Deterministic code only.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from temporalio import workflow

from . import json_schema
from .decisions import CallbackAnswer, PendingCallback
from .elapsed import ms_since
from .input_limits import QUOTED_ID_CHARS, InputTooLarge
from .outcomes import Outcome, bounded
from .reporting import Reporter
from .specs import ToolSpec
from .state import RunState
from .transcript import ToolCall

MAX_ANSWER_BYTES = 256_000
"""A callback's answer as JSON, at most: it is written to the run's history (the update's
accepted event) and to the transcript. The model reads at most the tool's max_result_chars."""
TIMEOUT_SUMMARY_CHARS = 200


class CallbackGate:
    """The run's callback calls that wait for a client, and their answers."""

    def __init__(self, state: RunState, reporter: Reporter) -> None:
        self._state = state
        self._reporter = reporter
        self._pending: dict[str, PendingCallback] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._answers: dict[str, Any] = {}

    def pending(self) -> list[PendingCallback]:
        """The calls that wait for an answer now, in the order they were asked."""
        return list(self._pending.values())

    async def wait(
        self, call: ToolCall, spec: ToolSpec, arguments: dict[str, Any]
    ) -> tuple[Outcome, Any]:
        """Publish the call, wait for its answer or its timeout: the call's outcome, and the
        answer (None when it timed out)."""
        asked_at = workflow.now()
        pending = PendingCallback(
            call_id=call.id,
            tool=spec.name,
            arguments=arguments,
            step=self._state.steps,
            asked_at=asked_at,
            timeout_seconds=spec.timeout_seconds,
        )
        self._pending[call.id] = pending
        self._specs[call.id] = spec
        self._reporter.publish(
            "callback_requested",
            call_id=call.id,
            tool=spec.name,
            arguments=call.arguments[:1000],
        )
        self._say_what_waits()
        try:
            await workflow.wait_condition(
                lambda: call.id in self._answers,
                timeout=timedelta(seconds=spec.timeout_seconds),
                timeout_summary=f"answer to {spec.name} {call.id}"[:TIMEOUT_SUMMARY_CHARS],
            )
        except TimeoutError:
            if call.id in self._answers:
                # Answered in the workflow task its timer fired in: the sender was told it was
                # taken, so it is.
                return self._answered(call, spec, asked_at)
            timed_out = Outcome.error(
                call,
                f"Error: {spec.name} timed out: no client answered the call within "
                f"{spec.timeout_seconds:g} s. It was not carried out; say so, or try another way.",
                latency_ms=ms_since(asked_at),
            )
            return timed_out, None
        finally:
            if workflow.in_workflow():  # not when the worker drops the run from its cache
                self._pending.pop(call.id, None)
                self._specs.pop(call.id, None)
                self._say_what_waits()
        return self._answered(call, spec, asked_at)

    def _answered(self, call: ToolCall, spec: ToolSpec, asked_at: Any) -> tuple[Outcome, Any]:
        answer = self._answers.pop(call.id)
        text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        cut = len(text) - spec.max_result_chars
        if cut > 0:
            text = text[: spec.max_result_chars] + f"\n[{cut:,} more characters not shown]"
        outcome = Outcome.ok(call, text, latency_ms=ms_since(asked_at), truncated=cut > 0)
        return outcome, answer

    def validate(self, answer: CallbackAnswer) -> None:
        """ValueError with the reason when `answer` cannot be taken: no such call waits, or the
        result is over MAX_ANSWER_BYTES or does not match the tool's result schema."""
        pending = self._pending.get(answer.call_id)
        if pending is None or answer.call_id in self._answers:
            raise ValueError(
                f"no callback {bounded(answer.call_id, QUOTED_ID_CHARS)} waits for an answer: "
                "it was answered already, it timed out, or the run never asked it"
            )
        size = len(json.dumps(answer.result, ensure_ascii=False).encode())
        if size > MAX_ANSWER_BYTES:
            raise InputTooLarge(
                f"the answer has {size:,} bytes of JSON: at most {MAX_ANSWER_BYTES:,}; send "
                "what the model needs",
                "the answer",
            )
        schema = self._specs[answer.call_id].result
        if schema is not None and (problems := json_schema.problems(schema, answer.result)):
            raise ValueError(f"the answer does not match {pending.tool}'s result: {problems}")

    def take(self, answer: CallbackAnswer) -> PendingCallback:
        """Take a validated answer (checked again: two answers may be validated before either
        is taken, and only the first counts)."""
        self.validate(answer)
        self._answers[answer.call_id] = answer.result
        pending = self._pending[answer.call_id]
        self._reporter.publish("callback_answered", call_id=pending.call_id, tool=pending.tool)
        return pending

    def _say_what_waits(self) -> None:
        """The status line names the callbacks that wait, while the run is otherwise running: a
        run that waits for a person says so (and is listed so), whatever else waits beside."""
        if self._reporter.status != "running":
            return
        waiting = self.pending()
        if not waiting:
            self._reporter.set_status("running", f"step {self._state.steps}: answered")
            return
        names = ", ".join(f"{p.tool} ({p.call_id})" for p in waiting)
        self._reporter.set_status(
            "running",
            f"step {self._state.steps}: waiting for a client to answer {names}: update "
            "answer_callback",
        )
