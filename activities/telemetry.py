"""OpenTelemetry tracing: optional, off by default, configured by the standard OTEL_* variables.

Two kinds of spans:

- Temporal's own, from its `TracingInterceptor`: StartWorkflow on the client; RunWorkflow, one
  StartActivity per activity and CompleteWorkflow in the workflow (zero-length markers, all
  children of StartWorkflow); RunActivity around each attempt, a child of its StartActivity.
  The client puts its context in the workflow's headers, so a run sits in the same trace as
  the app code that started it. A run started by a client without the interceptor (the Web
  UI, or an app with tracing off) gets no workflow spans, and each RunActivity span starts a
  trace of its own.
- GenAI spans (OpenTelemetry's GenAI semantic conventions), made here, inside the activities:
  `chat {model}` for each model call and `execute_tool {name}` for each tool call, children of
  their RunActivity span. Activities never replay, so neither do these spans; the interceptor
  makes no workflow spans while a workflow replays.

Turning it on, in a worker's, the CLI's or an app's process (`configure_from_env`; a process
that ends with `os._exit`, as the CLI does, calls `flush` first):

- `OTEL_TRACES_EXPORTER`: `otlp`, `console` (to stderr, for local use), both (`otlp,console`) or
  `none`. When unset, setting `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) means
  `otlp`, and nothing set means off. `OTEL_SDK_DISABLED=true` turns everything off.
- The OTLP exporter speaks HTTP/protobuf and reads its own variables (`OTEL_EXPORTER_OTLP_*`:
  endpoint, headers, timeout, ...); `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` needs
  `opentelemetry-exporter-otlp-proto-grpc` installed. The SDK reads `OTEL_SERVICE_NAME`
  (default here: durable-agent-loop), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and
  `OTEL_BSP_*`.
- `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` adds the contents to the GenAI spans:
  the messages sent and received, the system prompt and tool definitions, a tool call's
  arguments and result, and the message of a tool's or model call's exception. Without it a span
  holds no prompt, arguments or results.

An app that sets up its own tracer provider (`opentelemetry.trace.set_tracer_provider`) gets the
same spans through it. With no provider at all the GenAI spans are the API's no-op: a few
function calls each, and nothing is attached to the context.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..workflows.activity_io import (
    ModelRequest,
    ModelResponse,
    ToolActivityInput,
    ToolActivityResult,
)
from ..workflows.transcript import AssistantMessage, Message, ToolResult, UserMessage

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import TracingInterceptor

SERVICE_NAME = "durable-agent-loop"
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_SCOPE = "durable_agent_loop"
_EXPORTERS = ("otlp", "console")


class TelemetryConfigurationError(RuntimeError):
    """The OTEL_* variables ask for something this process cannot do."""


_explicit_provider: trace.TracerProvider | None = None
_explicit_tracer: trace.Tracer | None = None
_global_tracer = trace.get_tracer(_SCOPE)
"""A proxy until an app or `configure_from_env` sets the global provider, then the real one."""
_configured_from_env = False


def configure(tracer_provider: trace.TracerProvider | None) -> None:
    """Trace through this provider instead of the global one (None: back to the global one).

    For tests and for apps that keep their provider to themselves; `interceptors()` and the
    GenAI spans both use it.
    """
    global _explicit_provider, _explicit_tracer
    _explicit_provider = tracer_provider
    _explicit_tracer = tracer_provider.get_tracer(_SCOPE) if tracer_provider else None


def enabled() -> bool:
    """Whether spans are recorded: a provider was configured here, from the environment, or by
    the app (a global SDK provider)."""
    if _explicit_provider is not None:
        return True
    return not isinstance(
        trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def exporters_from_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """The span exporters the OTEL_* variables ask for; [] means tracing is off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    names = [n for n in names if n]
    if not names:
        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        return ["otlp"] if endpoint else []
    if "none" in names:
        return []
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown:
        raise TelemetryConfigurationError(
            f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']!r}: unknown exporter "
            f"{', '.join(unknown)}; use otlp, console or none"
        )
    return list(dict.fromkeys(names))


def tracer_provider_from_env(environ: Mapping[str, str] | None = None) -> SdkTracerProvider | None:
    """A tracer provider with the exporters the OTEL_* variables ask for, or None when off."""
    env = os.environ if environ is None else environ
    exporters = exporters_from_env(env)
    if not exporters:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError as missing:
        raise TelemetryConfigurationError(
            f"tracing is configured (OTEL_* variables) but {missing.name} is missing: "
            'pip install -e ".[otel]"'
        ) from None
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    if "otlp" in exporters:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
    if "console" in exporters:
        # stderr: the starter's stdout carries the answer (or --json) and nothing else.
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    return provider


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    try:
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter()
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
                OTLPSpanExporter as GrpcSpanExporter,
            )

            return GrpcSpanExporter()
    except ImportError as missing:
        package = "opentelemetry-exporter-otlp-proto-" + ("grpc" if protocol == "grpc" else "http")
        raise TelemetryConfigurationError(
            f"OTLP over {protocol} needs {package} ({missing.name} is missing)"
        ) from None
    raise TelemetryConfigurationError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: use http/protobuf or grpc"
    )


def configure_from_env() -> bool:
    """Turn tracing on as the OTEL_* variables say, once per process; True when it is on.

    Sets the global tracer provider, so the app's own spans and any other instrumentation share
    its exporters. A provider set up before (by the app, or `opentelemetry-instrument`) is kept.
    Raises TelemetryConfigurationError for variables it cannot honour.
    """
    global _configured_from_env
    if _configured_from_env or enabled():
        return enabled()
    provider = tracer_provider_from_env()
    if provider is None:
        return False
    trace.set_tracer_provider(provider)
    _configured_from_env = True
    return True


def flush(timeout_seconds: float = 10.0) -> bool:
    """Export what was recorded so far; False if the exporters did not finish in time.

    For a process that exits without the interpreter's teardown (the CLI, `os._exit`): the SDK
    exports the last batch from an atexit hook, which then never runs. A no-op when tracing is
    off or the provider has nothing to flush.
    """
    provider = _explicit_provider or trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return True
    return bool(force_flush(int(timeout_seconds * 1000)))


def interceptors() -> list[TracingInterceptor]:
    """Temporal's tracing interceptor when tracing is on, else nothing.

    Give them to `Client.connect`: the client's calls get spans that carry the context into the
    workflow, and every worker built on that client inherits them.
    """
    if not enabled():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(_MessageFreeErrorsTracer(_tracer()))]


def worker_interceptors(client: Client) -> list[TracingInterceptor]:
    """The tracing interceptor for a worker whose client lacks one (and none when it has one)."""
    config = client.config()
    return missing_interceptors(config["interceptors"], config["plugins"])


def missing_interceptors(
    present: Iterable[object], plugins: Iterable[object] = ()
) -> list[TracingInterceptor]:
    """The tracing interceptor, unless tracing is off or Temporal's tracing is already there.

    `present` and `plugins` are a client's or worker's interceptors and plugins. Either of
    temporalio.contrib.opentelemetry's interceptors already makes the Temporal spans and carries
    the context (a second one would make each span twice), and so does its
    `OpenTelemetryPlugin`, whose interceptor is not among `present` yet when that plugin comes
    after AgentPlugin.
    """
    if not enabled():
        return []
    # Only now: temporalio.contrib.opentelemetry imports the OpenTelemetry SDK (the `otel`
    # extra) when it is imported, and a plain install must run with tracing off.
    from temporalio.contrib.opentelemetry import (
        OpenTelemetryInterceptor,
        OpenTelemetryPlugin,
        TracingInterceptor,
    )

    if any(isinstance(i, TracingInterceptor | OpenTelemetryInterceptor) for i in present):
        return []
    if any(isinstance(p, OpenTelemetryPlugin) for p in plugins):
        return []
    return interceptors()


@contextmanager
def hidden_from_child_processes() -> Iterator[None]:
    """Keep the OTEL_* variables from the child processes started in the block.

    For the embedded dev server: the Temporal server reads them too, and would trace itself to
    the app's collector, or refuse to start (it has no `console` exporter).
    """
    saved = {name: value for name, value in os.environ.items() if name.startswith("OTEL_")}
    for name in saved:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(saved)


def capture_content() -> bool:
    """Whether spans may hold message contents (the GenAI conventions' opt-in variable)."""
    value = os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower()
    return value in ("true", "span_only", "span_and_event")


def _tracer() -> trace.Tracer:
    return _explicit_tracer or _global_tracer


class _MessageFreeErrorsTracer(trace.Tracer):
    """The tracer of Temporal's interceptor, keeping exception messages out of its spans.

    The interceptor puts `{type}: {message}` in a failed span's status, and the API records the
    exception (message and traceback) as an event; a tool's exception may quote its arguments,
    and payload encryption cannot reach a trace. So unless content capture is on, an error keeps
    only its type, as the GenAI spans do."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        return _MessageFreeErrorsSpan(self._tracer.start_span(*args, **kwargs))

    @contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Any = None,
        links: Any = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


class _MessageFreeErrorsSpan(Span):
    def __init__(self, span: Span) -> None:
        self._span = span

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if not capture_content():
            if isinstance(status, Status) and status.description:
                status = Status(status.status_code, status.description.split(":", 1)[0])
            description = description.split(":", 1)[0] if description else description
        self._span.set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Any = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        if capture_content():
            self._span.record_exception(exception, attributes, timestamp, escaped)
        else:
            self._span.add_event(
                "exception", {"exception.type": type(exception).__name__}, timestamp
            )

    def end(self, end_time: int | None = None) -> None:
        self._span.end(end_time)

    def get_span_context(self) -> trace.SpanContext:
        return self._span.get_span_context()

    def set_attributes(self, attributes: Any) -> None:
        self._span.set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self._span.set_attribute(key, value)

    def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
        self._span.add_event(name, attributes, timestamp)

    def add_link(self, context: trace.SpanContext, attributes: Any = None) -> None:
        self._span.add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self._span.update_name(name)

    def is_recording(self) -> bool:
        return self._span.is_recording()


# --- GenAI spans -----------------------------------------------------------------------------


class ChatSpan:
    """The `chat {model}` span of one model call; every method is a no-op when not recording."""

    def __init__(self, span: Span | None, capture: bool) -> None:
        self._span = span
        self._capture = capture

    def record(self, response: ModelResponse) -> None:
        span = self._span
        if span is None:
            return
        usage = response.usage
        attributes: dict[str, Any] = {
            "gen_ai.response.model": response.model,
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        }
        if response.response_id:
            attributes["gen_ai.response.id"] = response.response_id
        if response.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [response.finish_reason]
        if self._capture:
            output = _message_json(response.message)
            if response.finish_reason:
                output["finish_reason"] = response.finish_reason
            attributes["gen_ai.output.messages"] = _dumps([output])
        span.set_attributes(attributes)


class ToolSpan:
    """The `execute_tool {name}` span of one tool call; a no-op when not recording."""

    def __init__(self, span: Span | None, capture: bool) -> None:
        self._span = span
        self._capture = capture

    def record(self, result: ToolActivityResult) -> None:
        if self._span is not None and self._capture:
            self._span.set_attribute("gen_ai.tool.call.result", result.content)

    def fail(self, error_type: str, description: str | None = None) -> None:
        """The tool did not run or did not succeed, without raising (e.g. invalid arguments)."""
        if self._span is not None:
            _set_error(self._span, error_type, description if self._capture else None)


@contextmanager
def chat_span(request: ModelRequest) -> Iterator[ChatSpan]:
    """Around one model call, in the model activity."""
    settings = request.settings
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": settings.provider,
        "gen_ai.request.model": settings.model,
    }
    with _span(f"chat {settings.model}", SpanKind.CLIENT, attributes) as (span, capture):
        if span is not None:
            _set_request_attributes(span, request, capture)
        yield ChatSpan(span, capture)


@contextmanager
def tool_span(tool_name: str, call: ToolActivityInput) -> Iterator[ToolSpan]:
    """Around one tool call, in the tool's activity."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.id": call.tool_call_id,
        "gen_ai.tool.type": "function",
    }
    with _span(f"execute_tool {tool_name}", SpanKind.INTERNAL, attributes) as (span, capture):
        if span is not None and capture:
            span.set_attribute("gen_ai.tool.call.arguments", _dumps(call.arguments))
        yield ToolSpan(span, capture)


@contextmanager
def _span(
    name: str, kind: SpanKind, attributes: dict[str, Any]
) -> Iterator[tuple[Span | None, bool]]:
    """A span made current for the block, ending in ERROR with `error.type` if it raises.

    Yields (None, False) without touching the context when nothing records it.
    """
    span = _tracer().start_span(name, kind=kind, attributes=attributes)
    if not span.is_recording():
        yield None, False
        return
    capture = capture_content()
    if activity.in_activity():
        span.set_attribute("gen_ai.conversation.id", activity.info().workflow_id or "")
    try:
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            yield span, capture
    except BaseException as error:
        _set_error(span, _error_type(error), f"{error}" if capture else None)
        if capture:
            span.record_exception(error)
        raise
    finally:
        span.end()


def _set_error(span: Span, error_type: str, message: str | None) -> None:
    span.set_attribute("error.type", error_type)
    description = f"{error_type}: {message}" if message else error_type
    span.set_status(Status(StatusCode.ERROR, description))


def _error_type(error: BaseException) -> str:
    """What Temporal records for it too: an ApplicationError's type, else the class name."""
    if isinstance(error, ApplicationError) and error.type:
        return error.type
    return type(error).__name__


def _set_request_attributes(span: Span, request: ModelRequest, capture: bool) -> None:
    settings = request.settings
    if settings.temperature is not None:
        span.set_attribute("gen_ai.request.temperature", settings.temperature)
    if settings.max_output_tokens is not None:
        span.set_attribute("gen_ai.request.max_tokens", settings.max_output_tokens)
    if not capture:
        return
    span.set_attribute(
        "gen_ai.input.messages", _dumps([_message_json(m) for m in request.messages])
    )
    if request.system:
        span.set_attribute(
            "gen_ai.system_instructions", _dumps([{"type": "text", "content": request.system}])
        )
    if request.tools:
        definitions = [
            {
                "type": "function",
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            }
            for spec in request.tools
        ]
        span.set_attribute("gen_ai.tool.definitions", _dumps(definitions))


def _message_json(message: Message) -> dict[str, Any]:
    """One message in the GenAI conventions' shape: a role and its parts."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, UserMessage):
        parts.append({"type": "text", "content": message.content})
    elif isinstance(message, AssistantMessage):
        if message.content:
            parts.append({"type": "text", "content": message.content})
        parts.extend(
            {
                "type": "tool_call",
                "id": call.id,
                "name": call.name,
                "arguments": _arguments(call.arguments),
            }
            for call in message.tool_calls
        )
    elif isinstance(message, ToolResult):
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    return {"role": message.role, "parts": parts}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text  # as the model wrote it, invalid JSON included


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
