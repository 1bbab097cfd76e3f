"""A run of 3,000 steps, end to end on the dev server: it finishes, what each run of its chain
carries stays under a bound that does not grow with the steps, and the `status` query, the
trace and the result stay far under Temporal's 2 MB limits. (Before the bound, the carried
state passed the 1.8 MB guard at about 2,000 steps and the run failed.)"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.call_ids import FILTER_BITS, MAX_EXACT_CALL_IDS
from durable_agent.workflows.continuation import (
    MAX_CARRIED_BYTES,
    MAX_CARRIED_EVENT_BYTES,
    MAX_CARRIED_TRANSCRIPT_BYTES,
)
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.loop_detection import MAX_REMEMBERED_CALLS
from durable_agent.workflows.paging import TracePageRequest
from durable_agent.workflows.status import RunStatus
from durable_agent.workflows.trace import MAX_KEPT_TRACE_BYTES
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn

STEPS = 3_000


async def carried_states(client: Client, workflow_id: str) -> list[dict[str, Any]]:
    """The state each later run of the chain started from, oldest first."""
    states = []
    async for execution in client.list_workflows(f"WorkflowId='{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        history = await handle.fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        agent_input = json.loads(started.input.payloads[0].data)
        if agent_input.get("carried"):
            states.append(agent_input["carried"])
    return sorted(states, key=lambda state: state["steps"])


def size(value: Any) -> int:
    """Bytes of JSON, as pydantic writes it (no spaces)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


@pytest.mark.timeout(900)
async def test_a_run_of_3000_steps_finishes_and_carries_bounded_state(
    client: Client, task_queue: str
) -> None:
    # Every call is new (no loop), and every tenth repeats one call, which loop detection
    # stops on its third time: the counts go on working across the whole chain.
    script = [
        turn(call("count_me", key="same" if n % 10 == 0 else f"key-{n}")) for n in range(STEPS - 1)
    ]
    agent_input = scripted_input(
        [*script, turn(text="all counted")],
        tools=["count_me"],
        limits=Limits(max_steps=STEPS, max_context_tokens=6_000),
        compaction="window",
        continue_as_new_after_steps=500,
    )
    workflow_id = f"long-{uuid.uuid4()}"
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=workflow_id, task_queue=task_queue
        )
        result = await handle.result()
        status = await handle.query(AgentWorkflow.status)
        whole = await AgentRun(handle, client).full_trace()
        first_page = await handle.query(
            AgentWorkflow.trace_page, TracePageRequest(start=0, max_bytes=50_000)
        )

    assert result.answer == "all counted" and result.steps == STEPS
    states = await carried_states(client, workflow_id)
    assert len(states) >= STEPS // 500 - 1
    # Each part of what the chain carries stays under its bound, whatever the step count.
    rest = [size({k: v for k, v in state.items() if k != "messages"}) for state in states]
    last = states[-1]
    parts = {k: size(v) for k, v in last.items()}
    assert max(rest) < 700_000, (rest, parts)
    assert all(size(state) < MAX_CARRIED_BYTES for state in states)
    assert all(size(state["messages"]) < MAX_CARRIED_TRANSCRIPT_BYTES for state in states[1:])
    assert all(size(state["step_records"]) < 1.2 * MAX_KEPT_TRACE_BYTES for state in states)
    assert len(last["call_ids"]) == MAX_EXACT_CALL_IDS
    assert len(base64.b64decode(last["older_call_ids"])) == FILTER_BITS // 8
    assert len(last["loop_counts"]) <= MAX_REMEMBERED_CALLS
    assert all(len(key) == 16 for key in last["loop_counts"])
    assert sum(len(item["data"]) for item in last["stream"]["log"]) <= MAX_CARRIED_EVENT_BYTES
    # Loop detection still saw the repeated call on its third time, in the last run too.
    outcomes = [c.outcome for r in result.step_records for c in r.tool_calls]
    assert "loop_detected" in outcomes

    # Every step is accounted for: kept records, and the older ones added up.
    earlier = result.earlier_steps
    assert earlier is not None
    assert earlier.up_to_step + len(result.step_records) == STEPS
    assert [r.step for r in result.step_records] == list(range(earlier.up_to_step + 1, STEPS + 1))
    assert sum(earlier.tool_calls.values()) + len(outcomes) == STEPS - 1
    assert len(result.model_dump_json()) < 1_000_000
    # The status query answers the newest steps only; the trace pages through all it keeps.
    assert isinstance(status, RunStatus) and len(status.model_dump_json()) < 100_000
    assert status.step == STEPS and status.earlier_steps == earlier
    assert whole.step_records == result.step_records and whole.earlier_steps == earlier
    assert 0 < len(first_page.step_records) < first_page.total == len(result.step_records)
