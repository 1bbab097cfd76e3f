"""A server that does not know AgentStatus and AgentStep gets them before the first run."""

from __future__ import annotations

import uuid

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from agent_client import AgentClient
from tests.helpers import TEST_WORKER_OPTIONS, scripted_input, turn
from worker import build_worker, temporal_binary
from workflows.models import AGENT_STATUS


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
