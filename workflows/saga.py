"""The saga: the compensation log of a run's side effects, and undoing them when it fails.

An effect enters the log when its call succeeds (a sub-agent's effects join its parent's), and
also, marked "outcome unknown", when a call that changes data was cancelled, timed out or failed
after it started: it may have taken effect. A run that ends without an answer undoes them newest
first, each compensation its own activity
with its tool's own timeout and retries. A compensation that still fails is recorded and the
others still run. No wall-time deadline applies: undoing is what a run that ran out of time
needs most, and a cancel that arrives meanwhile does not stop it (see `undo_all`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from . import effect_log, paging, tool_catalog
from .context import RunContext
from .errors import FATAL_ERROR_TYPES, AgentError, describe_failure
from .outcomes import count
from .paging import EffectsPage, EffectsPageRequest
from .reporting import Reporter
from .state import AppliedEffect, CompensationRecord, CompensationStatus, FailureDetails

MAX_REPORTED_COMPENSATIONS = 1_000
"""The failure's details list the first this many compensations, and count the rest by status
(`compensations_left_out`), so that a run with thousands of effects can still fail: the error
has to fit Temporal's 2 MB too."""
MAX_NAMED_COMPENSATIONS = 20
"""The failure message names this many (those that failed first), and counts the rest."""


class Saga:
    def __init__(self, ctx: RunContext, reporter: Reporter):
        state = ctx.state
        self._state = state
        self._reporter = reporter
        self._heartbeat = ctx.input.heartbeat_timeout
        room = self._room = ctx.input.effect_log_room
        """A sub-agent's: what its parent's log has left (AgentInput.effect_log_room)."""
        self.compensations: list[CompensationRecord] = []
        """What undoing did, newest effect first (filled when the run fails)."""
        info = workflow.info()
        # What every key of this run's own calls starts with (see ToolRunner._execute).
        self._own_prefix = f"{info.workflow_id}/{info.first_execution_run_id}/"
        self._log_bytes = sum(effect.log_bytes(self._own_prefix) for effect in state.effects)
        self._bytes_for_parent = (
            0 if room is None else sum(effect.log_bytes("") for effect in state.effects)
        )
        """The log as the parent will count it: keys whole (they do not start with its prefix)."""

    @property
    def effects(self) -> list[AppliedEffect]:
        return self._state.effects

    def record(self, effect: AppliedEffect) -> None:
        """Enter an effect, keeping no arguments or value over their bounds (effect_log.py)."""
        kept = effect.bounded()
        self._state.effects.append(kept)
        self._log_bytes += kept.log_bytes(self._own_prefix)
        if self._room is not None:
            self._bytes_for_parent += kept.log_bytes("")

    def adopt(self, effects: list[AppliedEffect]) -> None:
        """A sub-agent's effects: undone by this run if it fails after delegating."""
        for effect in effects:
            self.record(effect)

    def room_left(self) -> int:
        """What a sub-agent started now may add to this log (AgentInput.effect_log_room)."""
        left = effect_log.MAX_LOG_BYTES - self._log_bytes
        if self._room is not None:
            left = min(left, self._room - self._bytes_for_parent)
        return max(left, 0)

    def full(self) -> str | None:
        """Why no more side effects may start, when the log has reached its bound."""
        if self._room is not None and self._bytes_for_parent >= self._room:
            return (
                f"the compensation log this sub-agent shares with its parent is full "
                f"({count(len(self.effects), 'side effect')} here, {self._bytes_for_parent:,} "
                f"bytes of the {self._room:,} the parent had left, so that it can always undo "
                "them all)"
            )
        if self._log_bytes < effect_log.MAX_LOG_BYTES:
            return None
        return (
            f"this run's compensation log is full ({count(len(self.effects), 'side effect')}, "
            f"{self._log_bytes:,} bytes; it keeps at most {effect_log.MAX_LOG_BYTES:,} so that "
            "it can always undo them all)"
        )

    def page(self, request: EffectsPageRequest) -> EffectsPage:
        """The log's entries from `start`, as many as fit in `max_bytes` (one at least)."""
        effects = self._state.effects
        page = paging.fitting(effects, request.start, request.max_bytes)
        return EffectsPage(effects=page, start=request.start, total=len(effects))

    async def compensate(self, keep: int = 0) -> None:
        """Undo the run's side effects, newest first, each as its own activity; the first
        `keep` stay (a conversation's answered turns')."""
        effects = self._state.effects[keep:]
        if effects:
            self._reporter.set_status(
                "compensating", f"undoing {count(len(effects), 'side effect')}"
            )
        for effect in reversed(effects):
            call = effect.call
            if effect.compensation is None:
                self.compensations.append(
                    CompensationRecord(
                        tool=call.tool,
                        tool_call_id=call.tool_call_id,
                        status="not_undone",
                        outcome_unknown=effect.outcome_unknown,
                    )
                )
                continue
            # The specs the run recorded; a sub-agent's effects of older runs may come from
            # tools this run was not given, which only the registry knows.
            recorded = self._state.tools.spec(call.tool) if self._state.tools else None
            spec = recorded or tool_catalog.specs([call.tool])[0]
            try:
                await workflow.execute_activity(
                    effect.compensation,
                    call,
                    start_to_close_timeout=timedelta(seconds=spec.compensation_timeout_seconds),
                    retry_policy=spec.compensation_retry.to_policy(FATAL_ERROR_TYPES),
                    heartbeat_timeout=self._heartbeat,
                    summary=f"undo {call.tool} {call.tool_call_id}",
                )
                status: CompensationStatus = "completed"
                error = None
                self._state.mark_compensated(call.tool_call_id)
            except ActivityError as failure:
                status, error = "failed", describe_failure(failure.cause)
            self.compensations.append(
                CompensationRecord(
                    tool=call.tool,
                    tool_call_id=call.tool_call_id,
                    status=status,
                    compensation=effect.compensation,
                    error=error,
                    outcome_unknown=effect.outcome_unknown,
                )
            )
            self._reporter.publish(
                "compensation",
                call_id=call.tool_call_id,
                tool=call.tool,
                outcome=status,
                text=effect.compensation if error is None else error,
            )

    async def undo_all(self, keep: int = 0) -> bool:
        """Compensate to the end (all but the first `keep`), shielded from a cancel that arrives
        meanwhile (an undo cut short would be recorded as failed when it may have completed).
        True when one did."""
        undoing = asyncio.ensure_future(self.compensate(keep))
        cancelled = False
        while True:
            try:
                await asyncio.shield(undoing)
                return cancelled
            except asyncio.CancelledError:
                if undoing.done():
                    raise
                cancelled = True

    def explain(self, error: AgentError, kept: int = 0) -> AgentError:
        """The error that ends the run, saying what was undone and what was not, and which
        effects it kept (the first `kept`: a conversation's answered turns')."""
        details = self._state.failure_details()
        records = self.compensations
        details.compensations = records[:MAX_REPORTED_COMPENSATIONS]
        for record in records[MAX_REPORTED_COMPENSATIONS:]:
            left_out = details.compensations_left_out
            left_out[record.status] = left_out.get(record.status, 0) + 1
        details.kept_effects = kept
        given = error.details[0] if error.details else None
        details.guardrail = given.guardrail if isinstance(given, FailureDetails) else None
        message = error.message
        if records:
            # Those that failed first: what a person must see, however many were undone.
            named = [r for r in records if r.status == "failed"][:MAX_NAMED_COMPENSATIONS]
            named += [r for r in records if r.status != "failed"][
                : MAX_NAMED_COMPENSATIONS - len(named)
            ]
            shown = [r for r in records if any(r is n for n in named)]
            outcomes = "; ".join(_describe(r) for r in shown)
            if len(records) > len(shown):
                tally = Counter(r.status for r in records)
                outcomes += (
                    f"; and {len(records) - len(shown):,} more ({len(records):,} in all: "
                    + ", ".join(f"{n:,} {status}" for status, n in sorted(tally.items()))
                    + ")"
                )
            message += f". Side effects undone newest first: {outcomes}"
        if kept:
            effects = self._state.effects[:kept]
            listed = ", ".join(f"{e.call.tool} {e.call.tool_call_id}" for e in effects[:10])
            more = f" and {kept - 10:,} more" if kept > 10 else ""
            message += (
                f". Side effects kept, as answered turns' effects stay (the person saw those "
                f"answers): {listed}{more}"
            )
        return type(error)(message, details)


def _describe(record: CompensationRecord) -> str:
    what = f"{record.tool} {record.tool_call_id}"
    if record.outcome_unknown:
        what += " (outcome unknown: it stopped before reporting)"
    if record.status == "not_undone":
        return f"{what} not undone (it has no compensation)"
    if record.status == "failed":
        return f"{what} FAILED to undo ({record.error})"
    return f"{what} undone by {record.compensation}"
