"""Tracing: Temporal's spans and the GenAI spans, in one trace with the app's own span.

The spans go to an in-memory exporter through a tracer provider of the test's own, handed to
`activities.telemetry.configure` (the global provider can be set once per process, so these
tests never set it; the tests of `configure_from_env`, which does, run in a subprocess).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agent.activities import telemetry
from durable_agent.cli import starter
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ModelRequest, ModelResponse
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.transcript import AssistantMessage, UserMessage
from durable_agent.workflows.usage import Usage
from tests import fake_anthropic, fake_openai
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, call, scripted_input, turn

ROOT = Path(__file__).resolve().parent.parent
CAPTURE = telemetry.CAPTURE_CONTENT_VARIABLE


class Exporter(InMemorySpanExporter):
    """Spans in memory, and the test-local provider that records them."""

    def __init__(self) -> None:
        super().__init__()
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(self))


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[Exporter]:
    """A test-local tracer provider, used by the interceptor and the GenAI spans."""
    for variable in ("OTEL_SDK_DISABLED", CAPTURE):
        monkeypatch.delenv(variable, raising=False)
    memory = Exporter()
    telemetry.configure(memory.provider)
    try:
        yield memory
    finally:
        telemetry.configure(None)
        memory.provider.shutdown()


@dataclass
class Traced:
    handle: WorkflowHandle[Any, Any]
    spans: list[ReadableSpan]
    app: ReadableSpan

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r}: {self.names()}"
        return found[0]

    def names(self) -> list[str]:
        return [s.name for s in self.spans]

    def parent(self, span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, f"{span.name} has no parent"
        by_id = {s.context.span_id: s for s in self.spans}
        return by_id[span.parent.span_id]

    def ancestry(self, span: ReadableSpan) -> list[str]:
        """The span's name and its ancestors', nearest first."""
        names = [span.name]
        while span.parent is not None:
            span = self.parent(span)
            names.append(span.name)
        return names

    def genai(self) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name.startswith(("chat ", "execute_tool "))]


def traced_client(client: Client) -> Client:
    """The session's client, with the tracing interceptor, as `worker.connect` makes it."""
    interceptors = telemetry.interceptors()
    assert [type(i) for i in interceptors] == [TracingInterceptor]
    return Client(**{**client.config(), "interceptors": interceptors})


async def traced_run(
    client: Client, task_queue: str, exporter: Exporter, agent_input: AgentInput
) -> Traced:
    """Start a run inside an app span, from a traced client, on a worker built on it."""
    traced = traced_client(client)
    app_tracer = exporter.provider.get_tracer("app")
    async with build_worker(traced, task_queue, **TEST_WORKER_OPTIONS):
        with app_tracer.start_as_current_span("handle support request") as app_span:
            handle = await traced.start_workflow(
                AgentWorkflow.run,
                agent_input,
                id=f"test-{uuid.uuid4()}",
                task_queue=task_queue,
            )
        await handle.result()
    spans = list(exporter.get_finished_spans())
    app = next(s for s in spans if s.context.span_id == app_span.get_span_context().span_id)
    return Traced(handle, spans, app)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_run_is_one_trace_under_the_app_span(
    client: Client, task_queue: str, exporter: Exporter
) -> None:
    run = await traced_run(
        client,
        task_queue,
        exporter,
        scripted_input(
            [
                turn(call("get_order", order_id=1042)),
                turn(call("always_fails", secret="s3cret")),
                turn(text="Order 1042 is on its way."),
            ],
            tools=["get_order", "always_fails"],
        ),
    )

    assert {s.context.trace_id for s in run.spans} == {run.app.context.trace_id}
    start = run.one("StartWorkflow:AgentWorkflow")
    assert run.parent(start) is run.app
    # TracingInterceptor's workflow spans are zero-length markers: RunWorkflow, each
    # StartActivity and CompleteWorkflow all hang from the client's StartWorkflow span.
    assert run.parent(run.one("RunWorkflow:AgentWorkflow")) is start
    assert run.parent(run.one("CompleteWorkflow:AgentWorkflow")) is start

    chats = run.named("chat scripted")
    assert len(chats) == 3
    for chat in chats:
        assert run.ancestry(chat) == [
            "chat scripted",
            "RunActivity:call_model",
            "StartActivity:call_model",
            "StartWorkflow:AgentWorkflow",
            "handle support request",
        ]
        assert chat.kind == SpanKind.CLIENT
        assert chat.status.status_code == StatusCode.UNSET

    tool = run.one("execute_tool get_order")
    assert run.ancestry(tool)[:4] == [
        "execute_tool get_order",
        "RunActivity:get_order",
        "StartActivity:get_order",
        "StartWorkflow:AgentWorkflow",
    ]
    assert tool.kind == SpanKind.INTERNAL
    assert tool.status.status_code == StatusCode.UNSET
    assert "error.type" not in attributes(tool)

    # Each attempt of the failing tool has its own RunActivity span and execute_tool span.
    failures = run.named("execute_tool always_fails")
    assert len(failures) == 3
    assert {run.parent(f).name for f in failures} == {"RunActivity:always_fails"}
    for failure in failures:
        assert failure.status.status_code == StatusCode.ERROR
        assert failure.status.description == "ValueError"
        assert attributes(failure)["error.type"] == "ValueError"
        assert attributes(failure)["gen_ai.tool.call.id"] == "call_2_1"
        assert not failure.events  # no exception message, no traceback, by default

    # The worker took its interceptor from the client only: one RunActivity span per attempt.
    assert len(run.named("RunActivity:call_model")) == 3
    assert len(run.named("RunActivity:always_fails")) == 3


async def test_the_chat_span_has_the_genai_attributes(
    client: Client, task_queue: str, exporter: Exporter
) -> None:
    usage = Usage(
        input_tokens=1200, output_tokens=40, cached_input_tokens=1000, cache_write_tokens=150
    )
    run = await traced_run(
        client,
        task_queue,
        exporter,
        scripted_input(
            [turn(call("read_thing", label="x"), usage=usage), turn(text="done", usage=usage)],
            tools=["read_thing"],
        ),
    )

    first, second = sorted(run.named("chat scripted"), key=lambda s: s.start_time or 0)
    assert attributes(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": "scripted",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 1200,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.cache_creation.input_tokens": 150,
        "gen_ai.conversation.id": run.handle.id,
    }
    assert attributes(second)["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes(run.one("execute_tool read_thing")) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "read_thing",
        "gen_ai.tool.call.id": "call_1_1",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": run.handle.id,
    }


async def test_invalid_arguments_make_an_error_tool_span(
    client: Client, task_queue: str, exporter: Exporter
) -> None:
    run = await traced_run(
        client,
        task_queue,
        exporter,
        scripted_input(
            [turn(call("typed", order_id="abc", note="n")), turn(text="sorry")], tools=["typed"]
        ),
    )

    span = run.one("execute_tool typed")
    assert span.status.status_code == StatusCode.ERROR
    assert attributes(span)["error.type"] == "invalid_arguments"
    assert "abc" not in json.dumps(attributes(span)) + (span.status.description or "")


async def test_openai_spans_carry_the_response_id_and_cached_tokens(
    client: Client, task_queue: str, exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_openai.FakeOpenAI(
        [fake_openai.Reply(content="On its way.", prompt_tokens=2000, cached_tokens=1536)]
    ) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        run = await traced_run(
            client,
            task_queue,
            exporter,
            AgentInput(
                prompt="where is order 1042",
                tools=[],
                model=ModelSettings(
                    provider="openai", model="gpt-fake-mini", retry=FAST_MODEL_RETRY
                ),
            ),
        )

    chat = attributes(run.one("chat gpt-fake-mini"))
    assert chat["gen_ai.provider.name"] == "openai"
    assert chat["gen_ai.response.id"] == "chatcmpl-fake0001"
    assert chat["gen_ai.usage.input_tokens"] == 2000
    assert chat["gen_ai.usage.cache_read.input_tokens"] == 1536
    assert chat["gen_ai.response.finish_reasons"] == ("stop",)


async def test_anthropic_spans_carry_the_response_id_and_cache_writes(
    client: Client, task_queue: str, exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = fake_anthropic.Reply(
        text="On its way.",
        input_tokens=10,
        cache_read_input_tokens=0,
        cache_creation_input_tokens=1500,
    )
    with fake_anthropic.FakeAnthropic([reply]) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", fake.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        run = await traced_run(
            client,
            task_queue,
            exporter,
            AgentInput(
                prompt="where is order 1042",
                tools=[],
                model=ModelSettings(
                    provider="anthropic", model="claude-fake", retry=FAST_MODEL_RETRY
                ),
            ),
        )

    chat = attributes(run.one("chat claude-fake"))
    assert chat["gen_ai.provider.name"] == "anthropic"
    assert str(chat["gen_ai.response.id"]).startswith("msg_fake")
    assert chat["gen_ai.usage.input_tokens"] == 1510
    assert chat["gen_ai.usage.cache_creation.input_tokens"] == 1500
    assert chat["gen_ai.response.finish_reasons"] == ("end_turn",)


MARKERS = ("PROMPT-7f3a", "SYSTEM-7f3a", "ARGUMENT-7f3a", "ANSWER-7f3a")


def content_run_input() -> AgentInput:
    return scripted_input(
        [
            turn(call("read_thing", label="ARGUMENT-7f3a"), text="Let me look."),
            turn(text="ANSWER-7f3a"),
        ],
        prompt="where is PROMPT-7f3a",
        tools=["read_thing"],
        system="You help. SYSTEM-7f3a",
    )


def span_text(span: ReadableSpan) -> str:
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    return json.dumps([attributes(span), events, span.status.description], default=str)


async def test_no_contents_in_spans_by_default(
    client: Client, task_queue: str, exporter: Exporter
) -> None:
    run = await traced_run(client, task_queue, exporter, content_run_input())

    assert len(run.genai()) == 3
    for span in run.spans:
        for marker in MARKERS:
            assert marker not in span_text(span), f"{marker} in {span.name}"


async def test_contents_in_spans_when_opted_in(
    client: Client, task_queue: str, exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE, "true")

    run = await traced_run(client, task_queue, exporter, content_run_input())

    first, second = sorted(run.named("chat scripted"), key=lambda s: s.start_time or 0)
    assert json.loads(attributes(first)["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "where is PROMPT-7f3a"}]}
    ]
    assert json.loads(attributes(first)["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "You help. SYSTEM-7f3a"}
    ]
    definitions = json.loads(attributes(first)["gen_ai.tool.definitions"])
    assert [d["name"] for d in definitions] == ["read_thing", "finish"]
    assert json.loads(attributes(first)["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Let me look."},
                {
                    "type": "tool_call",
                    "id": "call_1_1",
                    "name": "read_thing",
                    "arguments": {"label": "ARGUMENT-7f3a"},
                },
            ],
            "finish_reason": "tool_calls",
        }
    ]
    sent = json.loads(attributes(second)["gen_ai.input.messages"])
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[2]["parts"] == [
        {"type": "tool_call_response", "id": "call_1_1", "response": "done ARGUMENT-7f3a"}
    ]
    assert "ANSWER-7f3a" in attributes(second)["gen_ai.output.messages"]

    tool = attributes(run.one("execute_tool read_thing"))
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"label": "ARGUMENT-7f3a"}
    assert tool["gen_ai.tool.call.result"] == "done ARGUMENT-7f3a"


async def test_a_replay_makes_no_spans(client: Client, task_queue: str, exporter: Exporter) -> None:
    run = await traced_run(
        client,
        task_queue,
        exporter,
        scripted_input(
            [turn(call("read_thing", label="a"), call("read_thing", label="b")), turn(text="ok")],
            tools=["read_thing"],
        ),
    )
    assert len(run.genai()) == 4
    history = await run.handle.fetch_history()
    exporter.clear()

    replayer = Replayer(
        workflows=[AgentWorkflow],
        data_converter=pydantic_data_converter,
        interceptors=telemetry.interceptors(),
    )
    result = await replayer.replay_workflow(history)

    assert result.replay_failure is None
    assert [s.name for s in exporter.get_finished_spans()] == []


def test_spans_outside_a_run_record_the_response(exporter: Exporter) -> None:
    request = ModelRequest(
        settings=ModelSettings(model="m", temperature=0.2, max_output_tokens=256),
        system=None,
        messages=[UserMessage(content="hi")],
        tools=[],
        step=1,
    )
    response = ModelResponse(
        message=AssistantMessage(content="hello"),
        usage=Usage(input_tokens=3, output_tokens=1),
        model="m-2026",
        finish_reason="stop",
        response_id="resp-1",
    )

    with telemetry.chat_span(request) as span:
        span.record(response)

    (finished,) = exporter.get_finished_spans()
    assert finished.name == "chat m"
    assert attributes(finished)["gen_ai.response.id"] == "resp-1"
    assert attributes(finished)["gen_ai.response.model"] == "m-2026"
    assert attributes(finished)["gen_ai.request.temperature"] == 0.2
    assert attributes(finished)["gen_ai.request.max_tokens"] == 256
    assert "gen_ai.conversation.id" not in attributes(finished)  # not in an activity


async def test_a_worker_gets_the_interceptor_only_when_its_client_lacks_it(
    client: Client, exporter: Exporter
) -> None:
    assert [type(i) for i in telemetry.worker_interceptors(client)] == [TracingInterceptor]
    assert telemetry.worker_interceptors(traced_client(client)) == []


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, Console"}, ["otlp", "console"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://localhost:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, []),
    ],
)
def test_the_exporters_the_environment_asks_for(
    environ: dict[str, str], expected: list[str]
) -> None:
    assert telemetry.exporters_from_env(environ) == expected


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "unknown exporter zipkin"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "use http/protobuf or grpc",
        ),
    ],
)
def test_variables_it_cannot_honour_are_refused(environ: dict[str, str], message: str) -> None:
    with pytest.raises(telemetry.TelemetryConfigurationError, match=message):
        telemetry.tracer_provider_from_env(environ)


def test_an_otlp_provider_is_built_from_the_environment() -> None:
    provider = telemetry.tracer_provider_from_env({"OTEL_TRACES_EXPORTER": "otlp"})
    assert isinstance(provider, TracerProvider)
    provider.shutdown()  # nothing was recorded, so nothing is sent


def run_python(code: str, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


SPAN_OUTSIDE_A_RUN = """
    from opentelemetry import trace
    from durable_agent.activities import telemetry
    from durable_agent.workflows.activity_io import ModelRequest
    from durable_agent.workflows.inputs import ModelSettings

    request = ModelRequest(settings=ModelSettings(), system=None, messages=[], tools=[], step=1)
    on = telemetry.configure_from_env()
    with telemetry.chat_span(request):
        current = trace.get_current_span()
    print(on, len(telemetry.interceptors()), current is trace.INVALID_SPAN)
"""


def test_tracing_is_off_without_variables_and_the_spans_are_no_ops() -> None:
    done = run_python(SPAN_OUTSIDE_A_RUN)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "0", "True"]


def test_the_console_exporter_writes_spans_to_stderr() -> None:
    done = run_python(SPAN_OUTSIDE_A_RUN, OTEL_TRACES_EXPORTER="console")

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "1", "False"]  # stdout: only what the code prints
    span = json.loads(done.stderr)
    assert span["name"] == "chat scripted"
    assert span["attributes"]["gen_ai.provider.name"] == "scripted"
    assert span["resource"]["attributes"]["service.name"] == "durable-agent-loop"


def test_sdk_disabled_turns_tracing_off() -> None:
    done = run_python(SPAN_OUTSIDE_A_RUN, OTEL_TRACES_EXPORTER="console", OTEL_SDK_DISABLED="true")

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "0", "True"]
    assert done.stderr == ""


WITH_THE_SDKS_PLUGIN = """
    import asyncio, json, os, uuid

    import opentelemetry.trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import (
        OpenTelemetryInterceptor,
        OpenTelemetryPlugin,
        create_tracer_provider,
    )
    from temporalio.worker import Worker

    from durable_agent import AgentPlugin
    from durable_agent.workflows.agent import AgentWorkflow
    from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn
    import tests.tools_for_tests  # registers read_thing

    # The SDK's plugin traces through the global provider, which must be its replay-safe one.
    memory = InMemorySpanExporter()
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    opentelemetry.trace.set_tracer_provider(provider)

    def connect(setup):
        sdk = OpenTelemetryPlugin(add_temporal_spans=True)
        agent = AgentPlugin(providers=())
        target = os.environ["TEMPORAL_ADDRESS"]
        if setup == "sdk plugin first":
            return Client.connect(target, plugins=[sdk, agent])
        if setup == "sdk plugin last":
            return Client.connect(target, plugins=[agent, sdk])
        interceptor = OpenTelemetryInterceptor(add_temporal_spans=True)
        return Client.connect(target, plugins=[agent], interceptors=[interceptor])

    async def main():
        names = {}
        for setup in ("sdk plugin first", "sdk plugin last", "sdk interceptor"):
            client = await connect(setup)
            queue = f"test-{uuid.uuid4()}"
            script = [turn(call("read_thing", label="a")), turn(text="ok")]
            async with Worker(client, task_queue=queue, **TEST_WORKER_OPTIONS):
                await client.execute_workflow(
                    AgentWorkflow.run,
                    scripted_input(script, tools=["read_thing"]),
                    id=f"test-{uuid.uuid4()}",
                    task_queue=queue,
                )
            names[setup] = [s.name for s in memory.get_finished_spans()]
            memory.clear()
        print(json.dumps(names), flush=True)

    asyncio.run(main())
    # Skip the interpreter's teardown, as the CLI does (serving.command_line.exit_now): the
    # SDK's Rust threads can abort it with "PyGILState_Release ... finalizing"
    # (temporalio/sdk-python#300), turning a run that printed its spans into status -6.
    os._exit(0)
"""


def test_with_the_sdks_opentelemetry_plugin_a_runs_spans_are_made_once(client: Client) -> None:
    """temporalio.contrib.opentelemetry's plugin (or its interceptor) already traces the client
    and the worker: AgentPlugin adds no second interceptor, whichever comes first."""
    done = run_python(
        WITH_THE_SDKS_PLUGIN, TEMPORAL_ADDRESS=client.service_client.config.target_host
    )

    assert done.returncode == 0, done.stderr
    for setup, names in json.loads(done.stdout).items():
        counts = {name: names.count(name) for name in names}
        assert counts["StartWorkflow:AgentWorkflow"] == 1, (setup, counts)
        assert counts["RunWorkflow:AgentWorkflow"] == 1, (setup, counts)
        assert counts["RunActivity:call_model"] == 2, (setup, counts)
        assert counts["RunActivity:read_thing"] == 1, (setup, counts)
        assert counts["chat scripted"] == 2, (setup, counts)
        assert counts["execute_tool read_thing"] == 1, (setup, counts)


async def test_the_embedded_dev_server_does_not_see_the_otel_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The Temporal server reads OTEL_* itself, and refuses to start with the console exporter.
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")

    async with embedded_dev_server() as env:
        assert os.environ["OTEL_TRACES_EXPORTER"] == "console"
        info = await env.client.workflow_service.get_system_info(GetSystemInfoRequest())

    assert info.server_version


# --- the CLI -----------------------------------------------------------------------------------

CLI_PROMPT = "Where is my latest order? My email is a@b.com."


def run_starter(tmp_path: Path, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """`starter.py CLI_PROMPT` in a child process, as a person runs it (it ends with os._exit)."""
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in hidden and not k.startswith("OTEL_")}
    env.update(environ, AGENT_DEMO_DB=str(tmp_path / "demo.db"))
    return subprocess.run(
        [sys.executable, "starter.py", CLI_PROMPT, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def console_spans(stderr: str) -> list[dict[str, Any]]:
    """The spans the console exporter wrote, among the progress lines."""
    decoder = json.JSONDecoder()
    spans, position = [], 0
    while (start := stderr.find("{\n", position)) != -1:
        span, position = decoder.raw_decode(stderr, start)
        spans.append(span)
    return spans


def test_the_cli_traces_its_run_to_the_console(tmp_path: Path) -> None:
    done = run_starter(tmp_path, OTEL_TRACES_EXPORTER="console")

    assert done.returncode == 0, done.stderr
    (answer,) = done.stdout.splitlines()  # stdout: the answer, and nothing else
    assert "1042" in answer and "{" not in done.stdout
    spans = console_spans(done.stderr)
    run = {
        "StartWorkflow:AgentWorkflow",  # the client's
        "RunActivity:call_model",  # the embedded worker's
        "chat scripted-demo",
        "execute_tool search_orders",
    }
    assert run <= {span["name"] for span in spans}
    assert [span["name"] for span in spans].count("chat scripted-demo") == 3
    # One trace, from the client's span down to the GenAI spans in the worker.
    assert len({span["context"]["trace_id"] for span in spans if span["name"] in run}) == 1


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP collector on this machine: keeps the spans it is sent."""

    def __init__(self) -> None:
        self.spans: list[str] = []
        super().__init__(("127.0.0.1", 0), CollectorHandler)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class CollectorHandler(BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.server.spans.extend(span.name for span in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_the_cli_flushes_a_batch_exporter_before_it_exits(
    tmp_path: Path, collector: Collector
) -> None:
    # The batch would wait ten minutes: only the CLI's flush can send it before os._exit.
    done = run_starter(
        tmp_path,
        "--json",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="600000",
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert {"chat scripted-demo", "execute_tool search_orders"} <= set(collector.spans)
    assert collector.spans.count("chat scripted-demo") == 3


def test_a_tracing_configuration_the_cli_cannot_honour_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")

    assert starter.main([CLI_PROMPT]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "starter.py: error: OTEL_TRACES_EXPORTER='zipkin': unknown exporter zipkin; use otlp, "
        "console or none\n"
    )
