"""The agent in an app's own Temporal client and worker: one `plugins=[AgentPlugin()]` argument.

    client = await Client.connect("localhost:7233", plugins=[AgentPlugin()])
    worker = Worker(client, task_queue="orders", workflows=[OrderWorkflow], activities=[refund])
    agent = AgentClient(client, task_queue="orders")      # starts runs that worker serves

Given to the client, the plugin applies to every worker built on it (the SDK passes a client's
worker plugins on), so the worker needs no argument of its own; given to a worker alone, it
configures that worker, and its client must still carry the agent's data converter.

- **Client:** the data converter. The agent's inputs and results are pydantic models, so the
  payload converter becomes `temporalio.contrib.pydantic`'s (a superset of the default one: the
  app's own dataclasses and JSON values convert as before); the app's payload codec is kept. With
  AGENT_PAYLOAD_KEYS set, payloads are encrypted as docs/encryption.md says. Tracing
  interceptors, when tracing is on (docs/tracing.md) and the app has none of its own (the SDK's
  `OpenTelemetryPlugin` among its plugins counts as one).
- **Worker:** `AgentWorkflow`; the activities (the model call, the tools this process
  registered with `@tool` or names in `tools=`, MCP servers' tools); the sandbox passing the
  agent's deterministic modules through, added to the app's own restrictions (the app's
  workflows stay sandboxed as they were); the stores checked writable before anything is served.
- **While the worker runs:** the search attributes the Web UI lists use are registered when the
  namespace lacks them; each real provider's model calls are served on a queue of their own
  (`<queue>-model-openai`, ...), with that provider's limits (docs/admission.md), by workers
  started and stopped with the app's; MCP servers are connected, and closed after.
- **Replayer:** the converter, the workflow and the sandbox, so that agent histories replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import temporalio.client
import temporalio.worker
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import DataConverter, DefaultPayloadConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ..activities import (
    message_store,
    read_result,
    result_store,
    scripts,
    telemetry,
    toolkits,
)
from ..activities.admission import (
    Admission,
    Gates,
)
from ..activities.guardrails import DEFAULT_GUARDRAILS
from ..activities.mcp_config import McpConfig, load_mcp_config, mcp_config_from
from ..activities.message_store import MessageStore
from ..activities.result_store import ResultStore
from ..activities.store_check import check_stores
from ..activities.tools import DEFAULT_TOOLS, ToolRegistry
from ..client.agent_client import ensure_search_attributes
from ..encryption import payload_codec
from ..workflows.agent import AgentWorkflow
from ..workflows.errors import AgentConfigurationError
from ..workflows.model_gateway import model_task_queue
from ..workflows.payloads import refusing_undecodable_input
from ..workflows.providers import ADMITTED_PROVIDERS
from . import sandbox_runner

if TYPE_CHECKING:
    from ..activities.mcp_tools import McpTools

PLUGIN_NAME = "durable_agent.AgentPlugin"

PROVIDER_WORKER_OPTIONS = (
    "interceptors",
    "identity",
    "graceful_shutdown_timeout",
    "deployment_config",
)
"""The options of the app's worker that the provider queues' workers take too; the rest (the
workflow cache, its own concurrency) stay the app's worker's. A versioned worker's model-call
queues belong to its deployment version, so a run's model calls go to the build it runs on."""

Sandbox = Literal["passthrough", "fast", "as-is"]
"""What AgentPlugin makes of a worker's workflow runner (its `sandbox` argument)."""

_log = logging.getLogger(__name__)


class AgentPlugin(SimplePlugin):
    """Serve and start agent runs from an app's own Temporal client and worker.

    Args:
        tools: The tools to serve, named as `--tools` names them (`"myapp.tools"`: the tools that
            module makes; `"retail:make_toolkit"`; `"demo"`), loaded now: this plugin's workers
            serve exactly these (and read_result), whatever else the process registered. Left
            out: the default registry, every tool `@tool` and `register_toolkit` registered in
            the process before the worker is built.
        mcp: The MCP servers whose tools runs may use: a config file's path, a loaded config, or
            an `McpTools` (default: $AGENT_MCP_CONFIG, read when the worker is built, else
            none; docs/mcp.md). Connected while a worker runs, closed after.
        admission: The model calls' limits per provider (default: the AGENT_MODEL_* variables).
        providers: The real providers whose model-call queues this worker serves (default all:
            openai, anthropic, openai-responses); `()` leaves them to other workers. The scripted
            model's calls always run on the worker's own queue.
        sandbox: What becomes of the worker's workflow runner. `"passthrough"` (the default):
            a sandboxed runner keeps the app's restrictions, plus the agent's deterministic
            modules passed through, so that they are not imported and compiled again for every
            run; an unsandboxed runner or one of the app's own is left as it is. `"fast"`: where
            the worker was given no runner, sandbox_runner's, which drops three of the sandbox's
            costs (docs/performance.md); only for a worker that serves the agent alone, since
            one of those costs keeps an app workflow's `isinstance` checks right on modules the
            sandbox restricts. `"as-is"`: the worker's runner, untouched.
    """

    def __init__(
        self,
        *,
        tools: Iterable[str] = (),
        mcp: McpTools | McpConfig | str | Path | None = None,
        admission: Admission | None = None,
        providers: Collection[str] = ADMITTED_PROVIDERS,
        sandbox: Sandbox = "passthrough",
        stores: Stores | None = None,
    ) -> None:
        unknown = sorted(set(providers) - set(ADMITTED_PROVIDERS))
        if unknown:
            raise AgentConfigurationError(
                f"AgentPlugin(providers=...): no model-call queue for {', '.join(unknown)} "
                f"(there is one for {', '.join(ADMITTED_PROVIDERS)})"
            )
        names = list(tools)
        self.tools = DEFAULT_TOOLS
        """What this plugin's workers serve: the default registry, which `@tool` and
        `register_toolkit` fill, unless the plugin was given `tools`; then exactly those, and
        read_result (a registry of its own: two plugins in one process share no tool)."""
        if names:
            self.tools = ToolRegistry()
            toolkits.load_tools([read_result.__name__, *names], into=self.tools)
        if isinstance(mcp, str | Path):
            mcp = load_mcp_config(str(mcp))
        self._mcp_setting = mcp
        self._mcp: McpTools | None = None
        self._mcp_resolved = False
        self.admission = admission
        """The model calls' limits; None: the AGENT_MODEL_* variables', read as a worker starts."""
        self.providers = tuple(p for p in ADMITTED_PROVIDERS if p in providers)
        self.gates = Gates()
        """The gates of this plugin's model calls, by queue and provider (admission.py)."""
        self.stores = stores
        """The message and result stores this plugin's activities use; None: the process's,
        from the environment (AGENT_STORE_URL, AGENT_MESSAGE_STORE, AGENT_RESULT_STORE)."""
        self._model_call: Callable[..., Any] | None = None
        self.sandbox = sandbox
        self._serving = 0
        """This plugin's workers running now: MCP connects with the first, closes after the last."""
        super().__init__(
            PLUGIN_NAME,
            data_converter=agent_data_converter,
            workflows=[AgentWorkflow],
            activities=self._with_activities,
            workflow_runner=self._runner,
        )

    # --- client ------------------------------------------------------------------------------

    def configure_client(
        self, config: temporalio.client.ClientConfig
    ) -> temporalio.client.ClientConfig:
        config = super().configure_client(config)
        present = config.get("interceptors", ())
        config["interceptors"] = [
            *present,
            *telemetry.missing_interceptors(present, config.get("plugins", ())),
        ]
        return config

    # --- worker ------------------------------------------------------------------------------

    @property
    def mcp(self) -> McpTools | None:
        """The MCP servers' tools: the ones given, else $AGENT_MCP_CONFIG's (read once, when a
        worker is first built: a client or a replayer never reads it)."""
        if not self._mcp_resolved:
            # Here, not at the top: the MCP SDK (like the providers' SDKs that the model call
            # imports) is the worker's, and an app's client process imports this module too.
            from ..activities.mcp_tools import McpTools

            setting = self._mcp_setting if self._mcp_setting is not None else mcp_config_from(None)
            self._mcp = McpTools(setting) if isinstance(setting, McpConfig) else setting
            self._mcp_resolved = True
        return self._mcp

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        # Before anything is served: a store that cannot be written would fail a run only
        # after its model call was paid for. Raises StoreNotWritable (one line). The demo's
        # database only where the demo's tools are served: an app's worker does not create it.
        check_stores(demo=toolkits.serves_demo(self.tools))
        config = super().configure_worker(config)
        client = config["client"].config(active_config=True)
        tracing = telemetry.missing_interceptors(
            [*client["interceptors"], *config.get("interceptors", ())],
            [*client["plugins"], *config.get("plugins", ())],
        )
        if tracing:
            config["interceptors"] = [*tracing, *config.get("interceptors", ())]
        if self.stores is not None:
            # Its model-call queues' workers take the worker's interceptors, this one among them.
            config["interceptors"] = [*config.get("interceptors", ()), _UsingStores(self.stores)]
        return config

    def _with_activities(self, existing: Sequence[Callable[..., Any]] | None) -> list[Any]:
        mcp = self.mcp
        served = [
            self._call_model(),
            *(mcp.activities(self.tools) if mcp is not None else [self.tools.resolver()]),
            *self.tools.activities(),
            # Code mode's script legs (docs/code-mode.md): a sandbox process starts only when a
            # run's script first runs on this worker.
            scripts.run_script,
            # Every guardrail the process registered (docs/guardrails.md): runs name theirs.
            *DEFAULT_GUARDRAILS.activities(),
        ]
        return [*(existing or ()), *served]

    def _call_model(self) -> Callable[..., Any]:
        """The model-call activity over this plugin's gates, made when a worker first needs it:
        the model call imports the providers' SDKs, which a client process must not load."""
        if self._model_call is None:
            from ..activities.model_call import model_call

            self._model_call = model_call(self.gates)
        return self._model_call

    def _runner(self, existing: WorkflowRunner | None) -> WorkflowRunner:
        existing = existing if existing is not None else SandboxedWorkflowRunner()
        if self.sandbox == "as-is":
            return existing
        if _is_stock_sandbox(existing):
            if self.sandbox == "fast":
                return sandbox_runner.WORKFLOW_RUNNER
            return sandbox_runner.STOCK_RUNNER
        if isinstance(existing, SandboxedWorkflowRunner):
            # The app's own sandbox settings, plus the agent's modules passed through.
            return dataclasses.replace(
                existing,
                restrictions=existing.restrictions.with_passthrough_modules(
                    *sandbox_runner.PASSED_THROUGH
                ),
            )
        return existing  # unsandboxed, or a runner of the app's own: the app's choice

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        await ensure_search_attributes(worker.client)
        async with self._connected(), self._provider_queues(worker) as provider_stopped:
            serving = asyncio.ensure_future(next(worker))
            try:
                await asyncio.wait([serving, provider_stopped], return_when=asyncio.FIRST_COMPLETED)
                if not serving.done():
                    # A provider queue's worker stopped: stop the app's worker too, and say why.
                    await worker.shutdown()
                    await serving
                    provider_stopped.result()
                await serving
            finally:
                if not serving.done():
                    serving.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await serving

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[None]:
        mcp = self.mcp
        if mcp is None:
            yield
            return
        if self._serving == 0:
            mcp.start()
            _log.info("MCP servers: %s", ", ".join(mcp.config.servers) or "none")
        self._serving += 1
        try:
            yield
        finally:
            self._serving -= 1
            if self._serving == 0:
                await mcp.close()

    @contextlib.asynccontextmanager
    async def _provider_queues(self, worker: Worker) -> AsyncIterator[asyncio.Future[None]]:
        """The workers of the providers' model-call queues, running while the block runs; the
        future it yields ends when one of them stops by itself (with its error)."""
        from ..activities.model_call import STREAM_HEARTBEAT_THROTTLE

        config = worker.config(active_config=True)
        # A client of the same connection without the plugins: the app's client plugins
        # (this one among them) must not make these workers serve the agent's workflow again.
        bare = without_plugins(config["client"])
        shared: dict[str, Any] = {k: config[k] for k in PROVIDER_WORKER_OPTIONS if k in config}  # type: ignore[literal-required]
        limits = Admission.from_env() if self.admission is None else self.admission
        workers = []
        for provider in self.providers:
            own = limits.limits(provider)
            queue = model_task_queue(worker.task_queue, provider)
            self.gates.install(queue, provider, own)
            workers.append(
                Worker(
                    bare,
                    task_queue=queue,
                    activities=[self._call_model()],
                    max_concurrent_activities=own.concurrency,
                    max_task_queue_activities_per_second=own.rate_per_second,
                    # A streaming call's progress rides on its heartbeats: sent this often at most.
                    max_heartbeat_throttle_interval=STREAM_HEARTBEAT_THROTTLE,
                    **shared,
                )
            )
        running = [asyncio.ensure_future(w.run()) for w in workers]
        stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def first_stop(task: asyncio.Future[None]) -> None:
            if not stopped.done():
                error = None if task.cancelled() else task.exception()
                stopped.set_exception(error or RuntimeError("a model-call queue's worker stopped"))

        for task in running:
            task.add_done_callback(first_stop)
        try:
            yield stopped
        finally:
            for task in running:
                task.remove_done_callback(first_stop)
            await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
            await asyncio.gather(*running, return_exceptions=True)
            if stopped.done():
                stopped.exception()  # retrieved: it was raised, or the app's worker ended first
            else:
                stopped.cancel()


@dataclasses.dataclass(frozen=True)
class Stores:
    """The stores a plugin's activities use instead of the process's: what linear history's
    references name (a MessageStore: activities/message_store.py) and externalised results (a
    ResultStore: activities/result_store.py). `AgentPlugin(stores=Stores(...))`."""

    messages: MessageStore
    results: ResultStore


class _UsingStores(temporalio.worker.Interceptor):
    """Sets a plugin's stores around each activity its workers run."""

    def __init__(self, stores: Stores) -> None:
        self._stores = stores

    def intercept_activity(
        self, next: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return _StoresInbound(next, self._stores)


class _StoresInbound(temporalio.worker.ActivityInboundInterceptor):
    def __init__(self, next: temporalio.worker.ActivityInboundInterceptor, stores: Stores) -> None:
        super().__init__(next)
        self._stores = stores

    async def execute_activity(self, input: temporalio.worker.ExecuteActivityInput) -> Any:
        messages = message_store.plugin_store.set(self._stores.messages)
        results = result_store.plugin_store.set(self._stores.results)
        try:
            return await super().execute_activity(input)
        finally:
            result_store.plugin_store.reset(results)
            message_store.plugin_store.reset(messages)


def agent_data_converter(existing: DataConverter | None) -> DataConverter:
    """`existing` (the app's converter) able to carry the agent's pydantic models, its codec
    kept; with payload keys configured, also encrypting. Raises AgentConfigurationError when the
    two cannot be combined: a payload converter of the app's own, or a codec of the app's own
    beside AGENT_PAYLOAD_KEYS."""
    ours = payload_codec.data_converter()
    if existing is None:
        return ours
    converter_class = existing.payload_converter_class
    if converter_class is DefaultPayloadConverter:
        converter_class = PydanticPayloadConverter
    elif not issubclass(converter_class, PydanticPayloadConverter):
        raise AgentConfigurationError(
            f"the client's payload converter ({converter_class.__name__}) cannot carry the "
            "agent's pydantic models: use temporalio.contrib.pydantic's PydanticPayloadConverter "
            "(or a subclass), or leave the converter to AgentPlugin"
        )
    # A run's input that does not fit the contract fails its run (workflows/payloads.py).
    converter_class = refusing_undecodable_input(converter_class)
    codec = existing.payload_codec
    failures = existing.failure_converter_class
    if ours.payload_codec is not None:
        if codec is not None and not isinstance(codec, payload_codec.EncryptionCodec):
            raise AgentConfigurationError(
                f"the client has a payload codec of its own ({type(codec).__name__}) and "
                f"{payload_codec.KEYS_VARIABLE} is set: encrypt with one of them"
            )
        codec, failures = ours.payload_codec, ours.failure_converter_class
    return dataclasses.replace(
        existing,
        payload_converter_class=converter_class,
        payload_codec=codec,
        failure_converter_class=failures,
    )


def without_plugins(client: temporalio.client.Client) -> temporalio.client.Client:
    """A client of `client`'s connection with its settings (its plugins' changes to them
    included), but no plugins: the workers built on it get nothing from them."""
    config = client.config(active_config=True)
    config["plugins"] = []
    return temporalio.client.Client(**config)


def _is_stock_sandbox(runner: WorkflowRunner) -> bool:
    """The runner a Worker gets when it is given none."""
    return (
        type(runner) is SandboxedWorkflowRunner
        and runner.restrictions == SandboxRestrictions.default
        and runner.runner_class is UnsandboxedWorkflowRunner
    )
