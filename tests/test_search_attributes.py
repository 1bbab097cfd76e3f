"""A server that does not know the run's search attributes gets them before the first run;
one where this client may not register them (Temporal Cloud) is checked, and told what to
register."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode, ServiceClient
from temporalio.testing import WorkflowEnvironment

from durable_agent.client import agent_client
from durable_agent.client.agent_client import AgentClient, SearchAttributesNotRegistered
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker
from durable_agent.workflows import versioning
from durable_agent.workflows.status import AGENT_STATUS
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


async def test_a_run_agent_client_starts_records_one_marker_and_no_upsert_of_what_is_set(
    client: Client, task_queue: str
) -> None:
    """AgentClient starts a run with AgentStatus running, AgentStep 0 and AgentCostUsd 0, and the
    run asks one patch (versioning.ONE_MARKER): its history has no upsert of its own before step
    10, where AgentStep moves, and one marker where five were (each with the SDK's
    TemporalChangeVersion upsert)."""
    script = [turn(call("count_me", key=f"sa-{uuid.uuid4()}")) for _ in range(12)]
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await agents.start(scripted_input([*script, turn(text="done")], tools=["count_me"]))
        assert (await run.result()).steps == 13
    history = await run.handle.fetch_history()
    upserts = [
        dict(e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields)
        for e in history.events
        if e.HasField("upsert_workflow_search_attributes_event_attributes")
    ]
    ours = [sorted(fields) for fields in upserts if "TemporalChangeVersion" not in fields]
    assert ours == [["AgentCostUsd", "AgentStep"], ["AgentStatus", "AgentStep"]], ours
    steps = [json.loads(fields["AgentStep"].data) for fields in upserts if "AgentStep" in fields]
    assert steps == [10, 13]
    patches = [
        json.loads(e.marker_recorded_event_attributes.details["patch-data"].payloads[0].data)
        for e in history.events
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert [patch["id"] for patch in patches] == [versioning.ONE_MARKER]
    description = await run.handle.describe()
    assert description.typed_search_attributes.get(AGENT_STATUS) == "completed"


class OperatorServiceRefused(ServiceClient):
    """The session's connection, but for the operator service, which answers `status` as
    Temporal Cloud does (UNIMPLEMENTED) or a server whose authorizer says no (PERMISSION_DENIED):
    the dev server has no way to refuse it. Everything else is the real server's."""

    def __init__(self, real: ServiceClient, status: RPCStatusCode) -> None:
        super().__init__(real.config)
        self.real = real
        self.status = status

    @property
    def worker_service_client(self) -> Any:
        return self.real.worker_service_client

    def update_rpc_metadata(self, metadata: Mapping[str, str | bytes]) -> None:
        self.real.update_rpc_metadata(metadata)

    def update_api_key(self, api_key: str | None) -> None:
        self.real.update_api_key(api_key)

    async def _rpc_call(self, rpc: str, req: Any, resp_type: Any, **options: Any) -> Any:
        if options["service"] == "operator":
            raise RPCError(f"{rpc} is not for this client", self.status, b"")
        return await self.real._rpc_call(rpc, req, resp_type, **options)


def refusing(client: Client, status: RPCStatusCode) -> Client:
    return Client(
        OperatorServiceRefused(client.service_client, status),
        namespace=client.namespace,
        data_converter=client.data_converter,
    )


REGISTER = (
    "temporal operator search-attribute create --namespace default --name AgentStatus --type "
    "Keyword --name AgentStep --type Int --name AgentCostUsd --type Double --name AgentError "
    "--type Keyword"
)
REGISTER_ON_CLOUD = (
    "tcld namespace search-attributes add --namespace default --search-attribute "
    "AgentStatus=Keyword --search-attribute AgentStep=Int --search-attribute AgentCostUsd=Double "
    "--search-attribute AgentError=Keyword"
)


async def test_where_registering_is_refused_runs_start_when_the_attributes_exist(
    client: Client,
    task_queue: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session's server has the attributes; this client may not list or register them."""
    caplog.set_level(logging.WARNING, logger="durable_agent.client.agent_client")
    monkeypatch.setattr(agent_client, "_WARNED", set())  # as in a process of its own
    started = []
    try:
        for status in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED):
            agents = AgentClient(refusing(client, status), task_queue)
            started.append(await agents.start(scripted_input([turn(text="hello")])))
    finally:
        for run in started:
            await run.handle.terminate("no worker serves it")

    assert len(started) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once a process
    assert "may not list or register search attributes in namespace 'default'" in warnings[0]
    assert REGISTER in warnings[0] and REGISTER_ON_CLOUD in warnings[0]


async def test_where_registering_is_refused_and_the_attributes_are_missing_the_start_fails(
    task_queue: str,
) -> None:
    async with await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
    ) as env:
        # A real refusal: SQL visibility has room for 3 attributes of type Double a namespace.
        for name in ("Price", "Weight", "Score"):
            await env.client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace="default",
                    search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE},
                )
            )
        failures = []
        for agents_client in (env.client, refusing(env.client, RPCStatusCode.UNIMPLEMENTED)):
            with pytest.raises(SearchAttributesNotRegistered) as failed:
                await AgentClient(agents_client, task_queue).start(
                    scripted_input([turn(text="hello")])
                )
            failures.append(failed.value)
        runs = await env.client.count_workflows()

    assert runs.count == 0
    real, cloud = failures
    assert "cannot have more than 3 search attribute of type Double" in real.message
    assert "is not for this client" in cloud.message
    for failure in failures:
        assert failure.type == "SearchAttributesNotRegistered" and "\n" not in failure.message
        assert failure.message.startswith(
            "the search attributes AgentStatus (Keyword), AgentStep (Int), AgentCostUsd "
            "(Double), AgentError (Keyword) are not registered in namespace 'default'"
        )
        assert REGISTER in failure.message and REGISTER_ON_CLOUD in failure.message
