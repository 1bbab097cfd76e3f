"""AgentPlugin on an app's own worker and client, in process: what it adds and what it keeps.

tests/test_app_embedding.py runs a whole app against the installed package; these check the
plugin's rules one by one against the session's dev server.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowFailureError
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    DataConverter,
    DefaultPayloadConverter,
    PayloadCodec,
)
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from durable_agent import AgentClient, AgentConfigurationError, AgentInputInvalid, AgentPlugin
from durable_agent.activities.message_store import SqliteMessageStore
from durable_agent.activities.result_store import SqliteResultStore
from durable_agent.encryption import payload_codec
from durable_agent.serving import sandbox_runner
from durable_agent.serving.plugin import Stores, agent_data_converter
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.payloads import RefusesUndecodableInput
from tests import fake_openai
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, scripted_input, turn
from tests.shout_app import ShoutWorkflow, shout


class _AppCodec(PayloadCodec):
    """A codec of the app's own, which the plugin must keep."""

    async def encode(self, payloads: list[Payload]) -> list[Payload]:  # type: ignore[override]
        return list(payloads)

    async def decode(self, payloads: list[Payload]) -> list[Payload]:  # type: ignore[override]
        return list(payloads)


# --- the data converter --------------------------------------------------------------------


def test_the_default_converter_becomes_pydantic_refusing_an_undecodable_input() -> None:
    converter = agent_data_converter(DataConverter.default)
    assert converter.payload_converter_class is RefusesUndecodableInput
    assert issubclass(RefusesUndecodableInput, PydanticPayloadConverter)
    assert agent_data_converter(None).payload_converter_class is RefusesUndecodableInput


def test_an_apps_pydantic_converter_is_kept_and_refuses_an_undecodable_input() -> None:
    decoded: list[Any] = []

    class Counting(PydanticPayloadConverter):
        def from_payloads(self, payloads: Any, type_hints: Any = None) -> list[Any]:
            decoded.append(type_hints)
            return super().from_payloads(payloads, type_hints)

    converter = agent_data_converter(DataConverter(payload_converter_class=Counting))
    payload = converter.payload_converter.to_payloads([{"prompt": None}])
    with pytest.raises(AgentInputInvalid, match=r"prompt: Input should be a valid string"):
        converter.payload_converter.from_payloads(payload, [AgentInput])
    assert decoded == [[AgentInput]]  # the app's own converter still decodes
    # Anything but a run's input fails as it did.
    with pytest.raises(ValidationError):
        converter.payload_converter.from_payloads(payload, [int])
    assert agent_data_converter(converter).payload_converter_class is (
        converter.payload_converter_class
    )


def test_the_apps_codec_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(payload_codec.KEYS_VARIABLE, raising=False)
    codec = _AppCodec()
    converter = agent_data_converter(DataConverter(payload_codec=codec))
    assert converter.payload_codec is codec
    assert converter.payload_converter_class is RefusesUndecodableInput


def test_payload_keys_add_encryption(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(payload_codec.KEYS_VARIABLE, payload_codec.new_key_pair("k1"))
    converter = agent_data_converter(DataConverter.default)
    assert isinstance(converter.payload_codec, payload_codec.EncryptionCodec)
    # Applied twice (client and replayer, say): still the one codec, no conflict.
    again = agent_data_converter(converter)
    assert isinstance(again.payload_codec, payload_codec.EncryptionCodec)


def test_an_apps_codec_beside_payload_keys_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(payload_codec.KEYS_VARIABLE, payload_codec.new_key_pair("k1"))
    with pytest.raises(AgentConfigurationError, match=r"_AppCodec.*AGENT_PAYLOAD_KEYS"):
        agent_data_converter(DataConverter(payload_codec=_AppCodec()))


def test_an_apps_own_payload_converter_is_refused() -> None:
    class Mine(DefaultPayloadConverter):
        pass

    with pytest.raises(AgentConfigurationError, match=r"Mine.*pydantic"):
        agent_data_converter(DataConverter(payload_converter_class=Mine))


async def test_agent_client_refuses_a_client_without_the_converter(client: Client) -> None:
    plain = Client(**{**client.config(active_config=True), "data_converter": DataConverter.default})
    with pytest.raises(AgentConfigurationError, match=r"plugins=\[durable_agent.AgentPlugin"):
        AgentClient(plain)


# --- the sandbox ---------------------------------------------------------------------------


def runner_of(plugin: AgentPlugin, given: object) -> object:
    return plugin._runner(given)  # type: ignore[arg-type]


def test_the_apps_sandbox_keeps_its_restrictions_and_passes_the_agent_through() -> None:
    own = SandboxRestrictions.default.with_passthrough_modules("myapp.models")
    runner = runner_of(AgentPlugin(), SandboxedWorkflowRunner(restrictions=own))
    assert type(runner) is SandboxedWorkflowRunner
    assert {"myapp.models", "durable_agent.workflows"} <= runner.restrictions.passthrough_modules
    # A worker given no runner: the SDK's own, with the agent's modules passed through.
    assert runner_of(AgentPlugin(), SandboxedWorkflowRunner()) is sandbox_runner.STOCK_RUNNER


def test_the_fast_sandbox_replaces_only_the_default() -> None:
    fast = AgentPlugin(sandbox="fast")
    assert runner_of(fast, SandboxedWorkflowRunner()) is sandbox_runner.WORKFLOW_RUNNER
    own = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default)
    own = dataclasses.replace(own, restrictions=own.restrictions.with_passthrough_modules("m"))
    assert type(runner_of(fast, own)) is SandboxedWorkflowRunner


def test_an_unsandboxed_or_untouched_runner_is_left_alone() -> None:
    unsandboxed = UnsandboxedWorkflowRunner()
    assert runner_of(AgentPlugin(), unsandboxed) is unsandboxed
    stock = SandboxedWorkflowRunner()
    assert runner_of(AgentPlugin(sandbox="as-is"), stock) is stock


def test_unknown_providers_are_a_clear_error() -> None:
    with pytest.raises(AgentConfigurationError, match="no model-call queue for gemini"):
        AgentPlugin(providers=["gemini"])


# --- a worker of the app's own -------------------------------------------------------------


async def test_an_apps_worker_serves_its_workflow_and_a_real_providers_run(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin on the worker alone (the client already has the pydantic converter): the
    app's workflow and an agent run whose model calls go to the OpenAI queue, which the plugin
    serves with a worker of its own while the app's runs, and stops with it."""
    with fake_openai.FakeOpenAI(
        [
            fake_openai.Reply(tool_calls=[("c1", "local_lookup", '{"key": "k"}')]),
            fake_openai.Reply("found it"),
        ]
    ) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        plugin = AgentPlugin(providers=["openai"])
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[ShoutWorkflow],
            activities=[shout],
            plugins=[plugin],
            **TEST_WORKER_OPTIONS,
        )
        agent_input = scripted_input([], tools=["local_lookup"]).model_copy(
            update={
                "model": ModelSettings(
                    provider="openai", model="gpt-fake-mini", retry=FAST_MODEL_RETRY
                )
            }
        )
        async with worker:
            shouted = await client.execute_workflow(
                ShoutWorkflow.run, "hi", id=f"shout-{uuid.uuid4()}", task_queue=task_queue
            )
            agents = AgentClient(client, task_queue)
            run = await agents.start(agent_input)
            result = await run.result()
        assert fake.remaining == 0
    assert shouted == "HI"
    assert result.answer == "found it"
    history = await run.handle.fetch_history()
    queues = {
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    }
    assert queues == {f"{task_queue}-model-openai"}


async def test_a_worker_without_provider_queues_leaves_them_to_others(
    client: Client, task_queue: str
) -> None:
    """providers=(): the scripted model's calls still run on the worker's own queue."""
    worker = Worker(
        client, task_queue=task_queue, plugins=[AgentPlugin(providers=())], **TEST_WORKER_OPTIONS
    )
    script = [turn(call("count_me", key=f"k-{uuid.uuid4().hex[:6]}")), turn(text="done")]
    async with worker:
        result = await client.execute_workflow(
            AgentWorkflow.run,
            scripted_input(script, tools=["count_me"]),
            id=f"test-{uuid.uuid4()}",
            task_queue=task_queue,
        )
        assert result.answer == "done"
        own = await pollers(client, task_queue)
        openai = await pollers(client, f"{task_queue}-model-openai")
    assert own and not openai


async def pollers(client: Client, queue: str) -> list[str]:
    """The identities of the workers that polled `queue` for activities."""
    described = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        )
    )
    return [p.identity for p in described.pollers]


async def test_a_model_queue_worker_that_stops_stops_the_apps_worker_with_its_reason(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model-call queue's worker that stops (here: its namespace is gone, which the server
    says at its first poll) must not leave the app's worker serving runs whose model calls
    nobody takes: the app's worker stops too, with that worker's error."""
    import durable_agent.serving.plugin as plugin_module

    def lost_namespace(of: Client) -> Client:
        config = of.config(active_config=True)
        config.update(plugins=[], namespace=f"gone-{uuid.uuid4().hex[:6]}")
        return Client(**config)

    monkeypatch.setattr(plugin_module, "without_plugins", lost_namespace)
    worker = Worker(
        client,
        task_queue=task_queue,
        plugins=[AgentPlugin(providers=["openai"])],
        **TEST_WORKER_OPTIONS,
    )
    with pytest.raises(RuntimeError, match="gone-"):
        await asyncio.wait_for(worker.run(), 30)
    assert worker.is_shutdown


async def test_two_plugins_in_one_process_serve_only_what_each_was_given(
    client: Client, task_queue: str
) -> None:
    """Each plugin's registry holds exactly its tools: a run on A cannot call B's, and each
    serves its own `search` though both are named so (the default registry could hold one)."""
    plugin_a = AgentPlugin(tools=["tests.plugin_tools_a", "tests.plugin_tools_a:SEARCH"])
    plugin_b = AgentPlugin(tools=["tests.plugin_tools_b", "tests.plugin_tools_b:SEARCH"])
    queue_a, queue_b = f"{task_queue}-a", f"{task_queue}-b"
    assert set(plugin_a.tools.tools()) == {"alpha_lookup", "search", "read_result"}
    assert set(plugin_b.tools.tools()) == {"beta_lookup", "search", "read_result"}

    def run_on(queue: str, tools: list[str] | None, *calls: Any) -> Any:
        script = [turn(*calls), turn(text="{last_tool_result}")]
        return client.execute_workflow(
            AgentWorkflow.run,
            scripted_input(script, tools=tools),
            id=f"test-{uuid.uuid4()}",
            task_queue=queue,
        )

    worker_a = Worker(client, task_queue=queue_a, plugins=[plugin_a], **TEST_WORKER_OPTIONS)
    worker_b = Worker(client, task_queue=queue_b, plugins=[plugin_b], **TEST_WORKER_OPTIONS)
    async with worker_a, worker_b:
        assert (await run_on(queue_a, None, call("search", term="x"))).answer == "A found x"
        assert (await run_on(queue_b, None, call("search", term="x"))).answer == "B found x"
        assert (await run_on(queue_a, None, call("alpha_lookup", key="k"))).answer == "A has k"
        with pytest.raises(WorkflowFailureError) as refused:
            await run_on(queue_a, ["beta_lookup"], call("beta_lookup", key="k"))
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "AgentConfigurationError"
    assert "beta_lookup" in cause.message


async def test_an_apps_worker_creates_nothing_of_the_demo_unless_it_serves_its_tools(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's database is a store only of a worker that serves the demo's tools: an app's
    worker checks (and so creates) its own stores, and no `.agent-demo/` where it runs."""
    monkeypatch.delenv("AGENT_DEMO_DB")
    monkeypatch.chdir(tmp_path)
    mine = AgentPlugin(tools=["tests.plugin_tools_a"])
    async with Worker(client, task_queue=task_queue, plugins=[mine], **TEST_WORKER_OPTIONS):
        script = [turn(call("alpha_lookup", key="k")), turn(text="{last_tool_result}")]
        done = await client.execute_workflow(
            AgentWorkflow.run,
            scripted_input(script),
            id=f"test-{uuid.uuid4()}",
            task_queue=task_queue,
        )
    assert done.answer == "A has k"
    assert not (tmp_path / ".agent-demo").exists()
    demos = AgentPlugin(tools=["tests.plugin_tools_a", "demo"])
    Worker(client, task_queue=f"{task_queue}-demo", plugins=[demos])
    assert (tmp_path / ".agent-demo" / "demo.db").exists()


async def test_a_plugin_given_stores_keeps_its_runs_in_them(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    """Two plugins, each with stores of its own: each run's linear-history links go to its
    plugin's message store, and neither touches the process's (the environment's)."""
    workers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        stores = Stores(
            messages=SqliteMessageStore(tmp_path / name / "messages.db"),
            results=SqliteResultStore(tmp_path / name / "results.db"),
        )
        plugin = AgentPlugin(tools=["tests.plugin_tools_a"], stores=stores)
        queue = f"{task_queue}-{name}"
        workers.append(Worker(client, task_queue=queue, plugins=[plugin], **TEST_WORKER_OPTIONS))
    script = [
        turn(call("alpha_lookup", key="k")),
        turn(call("alpha_lookup", key="j")),
        turn(text="done"),
    ]
    async with workers[0], workers[1]:
        for name in ("a", "b"):
            await client.execute_workflow(
                AgentWorkflow.run,
                scripted_input(script, prompt=f"a question for {name}", tools=["alpha_lookup"]),
                id=f"test-{uuid.uuid4()}",
                task_queue=f"{task_queue}-{name}",
            )

    def links(path: Path) -> set[str]:
        """The links a message store file holds (none: no file, or one the worker's start-up
        check only touched)."""
        with contextlib.closing(sqlite3.connect(path)) as db:
            made = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'links'").fetchone()
            return {row[0] for row in db.execute("SELECT ref FROM links")} if made else set()

    in_a, in_b = links(tmp_path / "a" / "messages.db"), links(tmp_path / "b" / "messages.db")
    assert in_a and in_b and not in_a & in_b  # the prompts differ, so every link does
    assert links(Path(os.environ["AGENT_MESSAGE_STORE"])) == set()
