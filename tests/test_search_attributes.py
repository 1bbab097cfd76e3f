"""A server that does not know AgentStatus and AgentStep gets them before the first run."""

from __future__ import annotations

import json
import uuid

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_agent.agent_client import AgentClient
from durable_agent.worker import build_worker, temporal_binary
from durable_agent.workflows.models import AGENT_STATUS
from tests.helpers import TEST_WORKER_OPTIONS, call, run_agent, scripted_input, turn


async def test_the_first_start_registers_the_search_attributes() -> None:
    # A bare dev server, as an app's own cluster might be: no custom search attributes.
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
    ) as env:
        request = ListSearchAttributesRequest(namespace=env.client.namespace)
        before = await env.client.operator_service.list_search_attributes(request)
        assert "AgentStatus" not in before.custom_attributes

        task_queue = f"sa-{uuid.uuid4()}"
        agents = AgentClient(env.client, task_queue)
        async with build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS):
            run = await agents.start(scripted_input([turn(text="hello")]))
            result = await run.result()

        after = await env.client.operator_service.list_search_attributes(request)
        assert {"AgentStatus", "AgentStep"} <= set(after.custom_attributes)
        assert result.answer == "hello"
        description = await run.handle.describe()
        assert description.typed_search_attributes.get(AGENT_STATUS) == "completed"


async def test_agent_step_moves_with_the_status_and_every_ten_steps(
    client: Client, task_queue: str
) -> None:
    """Every upsert is a history event and a visibility write: a step does not cost one of its
    own, yet AgentStep is never more than ten steps behind, and exact when the run ends."""
    script = [turn(call("count_me", key=f"sa-{uuid.uuid4()}")) for _ in range(12)]
    run = await run_agent(
        client, task_queue, scripted_input([*script, turn(text="done")], tools=["count_me"])
    )
    assert run.result is not None and run.result.steps == 13
    history = await run.handle.fetch_history()
    upserts = [
        e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    # The others are the SDK's own (TemporalChangeVersion, for the patch markers).
    steps = [json.loads(fields["AgentStep"].data) for fields in upserts if "AgentStep" in fields]
    assert steps == [0, 10, 13]
