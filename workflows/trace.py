"""The run's trace: one record per step, kept under a bound however long the run.

A step's record is the model call and every tool call it led to (state.StepRecord). A run keeps
its newest records, at most MAX_KEPT_STEP_RECORDS and MAX_KEPT_TRACE_BYTES of JSON, and adds the
older ones up into `state.earlier_steps`, so that neither the carried state, the `status` and
`trace` queries nor the result outgrow Temporal's 2 MB limits. Compaction records are kept the
same way. Pages of the kept records answer the `trace_page` query. Deterministic data only.
"""

from __future__ import annotations

from . import paging
from .paging import TracePage, TracePageRequest
from .state import EarlierSteps, RunState, StepRecord

MAX_KEPT_STEP_RECORDS = 1_000
MAX_KEPT_TRACE_BYTES = 250_000
"""About 600 records of one call each, or fewer of many calls with long arguments."""
MAX_KEPT_COMPACTIONS = 200


class Trace:
    def __init__(self, state: RunState) -> None:
        self._state = state
        self._sizes = [_size(record) for record in state.step_records]
        """JSON bytes of each kept record that is complete, oldest first."""

    def keep_bounded(self) -> None:
        """Between steps (every record complete): add up the oldest records past the bounds."""
        state = self._state
        records = state.step_records
        self._sizes.extend(_size(record) for record in records[len(self._sizes) :])
        total = sum(self._sizes)
        drop = 0
        while len(records) - drop > MAX_KEPT_STEP_RECORDS or (
            total > MAX_KEPT_TRACE_BYTES and len(records) - drop > 1
        ):
            total -= self._sizes[drop]
            self._fold(records[drop])
            drop += 1
        if drop:
            del records[:drop]
            del self._sizes[:drop]
        extra = len(state.compactions) - MAX_KEPT_COMPACTIONS
        if extra > 0:
            earlier = self._earlier()
            for compaction in state.compactions[:extra]:
                earlier.compactions += 1
                earlier.tokens_removed += compaction.tokens_removed
            del state.compactions[:extra]

    def page(self, request: TracePageRequest) -> TracePage:
        """The kept records from index `start`, as many as fit in `max_bytes` (one at least)."""
        records = self._state.step_records
        return TracePage(
            step_records=paging.fitting(records, request.start, request.max_bytes),
            start=request.start,
            total=len(records),
            earlier_steps=self._state.earlier_steps,
            tool_notices=self._state.tools.notices if self._state.tools else [],
        )

    def _earlier(self) -> EarlierSteps:
        if self._state.earlier_steps is None:
            self._state.earlier_steps = EarlierSteps()
        return self._state.earlier_steps

    def _fold(self, record: StepRecord) -> None:
        earlier = self._earlier()
        earlier.up_to_step = max(earlier.up_to_step, record.step)
        earlier.model_latency_ms += record.model_latency_ms
        earlier.model_attempts += record.model_attempts
        earlier.usage = earlier.usage + record.usage
        for call in record.tool_calls:
            earlier.tool_calls[call.outcome] = earlier.tool_calls.get(call.outcome, 0) + 1
            earlier.tool_attempts += call.attempts
            earlier.tool_latency_ms += call.latency_ms


def _size(record: StepRecord) -> int:
    return len(record.model_dump_json())
