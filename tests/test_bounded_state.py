"""What a run keeps stays under a bound however many steps it takes: call ids, loop counts, step
and compaction records. Pure code, no server (the 3,000-step run is in test_long_runs.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from durable_agent.workflows.call_ids import FILTER_BITS, MAX_EXACT_CALL_IDS, CallIds
from durable_agent.workflows.dispatch import with_unique_call_ids
from durable_agent.workflows.loop_detection import MAX_REMEMBERED_CALLS, LoopDetector, call_key
from durable_agent.workflows.paging import TracePageRequest
from durable_agent.workflows.state import CompactionRecord, RunState, StepRecord, ToolCallRecord
from durable_agent.workflows.trace import (
    MAX_KEPT_COMPACTIONS,
    MAX_KEPT_STEP_RECORDS,
    MAX_KEPT_TRACE_BYTES,
    Trace,
)
from durable_agent.workflows.transcript import AssistantMessage, ToolCall
from durable_agent.workflows.usage import Usage

START = datetime(2026, 12, 1, tzinfo=UTC)


def carried(state: RunState) -> RunState:
    """The state as the next run of the chain loads it."""
    return RunState.model_validate_json(state.model_dump_json())


def test_call_ids_past_the_exact_tail_are_never_forgotten() -> None:
    state = RunState.start(START)
    ids = CallIds(state)
    ids.bounded = True
    every = [f"toolu_{n:06d}" for n in range(3 * MAX_EXACT_CALL_IDS)]
    for start in range(0, len(every), 3):
        ids.add(every[start : start + 3])
    assert len(state.call_ids) == MAX_EXACT_CALL_IDS
    assert state.older_call_ids is not None
    assert len(state.older_call_ids) < FILTER_BITS // 8 * 4 // 3 + 4  # fixed, whatever the count
    again = CallIds(carried(state))
    assert all(call_id in again for call_id in every)
    # Ids it never saw are mostly not in it (the filter is far from full).
    unseen = [f"call_{n}" for n in range(1000)]
    assert sum(call_id in again for call_id in unseen) < 10


def test_a_repeated_id_from_long_ago_is_still_renamed() -> None:
    state = RunState.start(START)
    ids = CallIds(state)
    ids.bounded = True
    ids.add(["call_1"])
    ids.add([f"x{n}" for n in range(MAX_EXACT_CALL_IDS + 10)])
    assert "call_1" not in state.call_ids
    message = AssistantMessage(tool_calls=(ToolCall(id="call_1", name="t", arguments="{}"),))
    renamed = with_unique_call_ids(message, step=9_000, earlier=CallIds(carried(state)))
    assert renamed.tool_calls[0].id == "call_9000_1"


def test_an_older_run_keeps_every_id_exactly() -> None:
    state = RunState.start(START)
    ids = CallIds(state)  # not bounded: a run recorded before the bound replays as it ran
    ids.add([f"x{n}" for n in range(MAX_EXACT_CALL_IDS + 10)])
    assert len(state.call_ids) == MAX_EXACT_CALL_IDS + 10 and state.older_call_ids is None


def test_loop_counts_are_keyed_by_a_short_hash_and_bounded() -> None:
    loops = LoopDetector()
    loops.bounded = True
    huge = '{"text": "' + "x" * 50_000 + '"}'
    assert loops.record("write", huge) == 1
    assert all(len(key) == 16 for key in loops.counts)
    # Key order and spacing still do not matter.
    assert loops.record("get", '{"a": 1, "b": 2}') == 1
    assert loops.record("get", '{"b":2,"a":1}') == 2
    for n in range(MAX_REMEMBERED_CALLS):
        loops.record("get", f'{{"n": {n}}}')
    assert len(loops.counts) == MAX_REMEMBERED_CALLS
    # The least recently made call was forgotten; a call made again stays remembered.
    assert call_key("write", huge) not in loops.counts
    assert loops.record("get", f'{{"n": {MAX_REMEMBERED_CALLS - 1}}}') == 2


def test_counts_carried_by_an_older_release_keep_counting() -> None:
    counts = {'get_order\n{"id":1}': 2, call_key("other", "{}"): 1}
    loops = LoopDetector(counts)
    assert loops.counts is counts  # still the state's own dict
    assert loops.is_loop(loops.record("get_order", '{"id": 1}'))
    assert loops.record("other", "{}") == 2


def step(number: int, outcome: str = "ok", arguments: str = "{}") -> StepRecord:
    return StepRecord(
        step=number,
        model="scripted",
        model_latency_ms=10,
        usage=Usage(input_tokens=100, output_tokens=5, cost_usd=0.001),
        tool_calls=[
            ToolCallRecord(
                id=f"c{number}",
                name="t",
                arguments=arguments,
                outcome=outcome,  # type: ignore[arg-type]
                attempts=1,
                latency_ms=3,
            )
        ],
    )


def test_old_step_records_are_added_up_not_lost() -> None:
    state = RunState.start(START)
    trace = Trace(state)
    total_steps = MAX_KEPT_STEP_RECORDS + 250
    for number in range(1, total_steps + 1):
        state.step_records.append(step(number, "ok" if number % 5 else "error"))
        state.compactions.append(
            CompactionRecord(step=number, policy="window", messages_removed=2, tokens_removed=7)
        )
        trace.keep_bounded()
    kept = state.step_records
    assert len(kept) <= MAX_KEPT_STEP_RECORDS and kept[-1].step == total_steps
    assert sum(len(r.model_dump_json()) for r in kept) <= MAX_KEPT_TRACE_BYTES
    earlier = state.earlier_steps
    assert earlier is not None
    folded = earlier.up_to_step
    assert folded == kept[0].step - 1 >= 250
    assert earlier.usage.input_tokens == folded * 100 and earlier.model_latency_ms == folded * 10
    errors = folded // 5
    assert earlier.tool_calls == {"ok": folded - errors, "error": errors}
    assert earlier.tool_attempts == folded
    assert len(state.compactions) == MAX_KEPT_COMPACTIONS
    assert earlier.compactions == total_steps - MAX_KEPT_COMPACTIONS
    assert earlier.tokens_removed == 7 * earlier.compactions
    # A new run of the chain measures what it was given and goes on from there.
    again = carried(state)
    again.step_records.append(step(total_steps + 1))
    Trace(again).keep_bounded()
    assert again.earlier_steps is not None and again.earlier_steps.up_to_step == folded + 1


def test_records_with_long_arguments_are_bounded_by_bytes() -> None:
    state = RunState.start(START)
    trace = Trace(state)
    for number in range(1, 600):
        state.step_records.append(step(number, arguments="y" * 1_000))
        trace.keep_bounded()
    size = sum(len(r.model_dump_json()) for r in state.step_records)
    assert len(state.step_records) < 599 and size <= MAX_KEPT_TRACE_BYTES


def test_the_trace_pages_through_every_kept_record() -> None:
    state = RunState.start(START)
    state.step_records.extend(step(number) for number in range(1, 101))
    trace = Trace(state)
    seen: list[int] = []
    while True:
        page = trace.page(TracePageRequest(start=len(seen), max_bytes=2_000))
        assert page.step_records, "a page holds one record at least"
        seen.extend(r.step for r in page.step_records)
        if len(seen) >= page.total:
            break
    assert seen == list(range(1, 101))
