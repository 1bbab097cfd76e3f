"""The compensation log stays bounded: an entry keeps what its compensation needs, never a large
value, and the log travels compactly in the carried state and the result, for any run."""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import Client

import tests.tools_for_tests as test_tools
from durable_agent.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.models import AgentResult, Limits
from tests.helpers import TEST_WORKER_OPTIONS, call, run_agent, scripted_input, turn


async def test_large_results_of_compensable_calls_do_not_stop_the_run_completing(
    client: Client, task_queue: str
) -> None:
    """Nine 250 KB values kept in the log made a 2.2 MB result, which the server refused on
    every completion: the run hung. Only what a compensation needs is kept now."""
    script = [
        turn(*(call("huge_effect", size=250_000 + i) for i in range(9))),
        turn(text="done"),
    ]
    agent_input = scripted_input(script, tools=["huge_effect"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"log-{uuid.uuid4()}", task_queue=task_queue
        )
        result = await asyncio.wait_for(handle.result(), timeout=30)

    assert result.answer == "done"
    assert len(result.side_effects) == 9
    assert all(e.call.result is None and not e.call.result_kept for e in result.side_effects)
    assert len(result.model_dump_json()) < 30_000
