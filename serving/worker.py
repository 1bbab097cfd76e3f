"""What serves agent runs, for the worker command, the CLI, the benchmarks and the tests:
connecting with the agent's plugin, building the worker (an `AgentPlugin` worker that serves the
agent alone), a replayer of its histories, and a worker's deployment version. An app's own worker
takes the plugin instead (serving/plugin.py, docs/client.md). The command is cli/worker.py.

While it runs, the worker also serves one queue per real provider, `<queue>-model-openai`,
`<queue>-model-anthropic` and `<queue>-model-openai-responses`, each with that provider's limits
(AGENT_MODEL_CONCURRENCY_* and AGENT_MODEL_RATE_*, activities/admission.py, docs/admission.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import Replayer, Worker, WorkerDeploymentConfig

from ..activities import message_store, pricing, telemetry, toolkits
from ..activities.admission import Admission
from ..activities.mcp_config import McpConfig
from ..activities.mcp_tools import McpTools
from ..activities.store_check import StoreNotWritable, check_stores, describe_stores
from ..encryption.payload_codec import PayloadKeyError, data_converter
from ..workflows.errors import AgentConfigurationError
from ..workflows.inputs import DEFAULT_TASK_QUEUE
from ..workflows.model_gateway import model_task_queue
from ..workflows.providers import ADMITTED_PROVIDERS
from . import sandbox_runner
from .plugin import AgentPlugin, Sandbox, without_plugins

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


SETUP_ERRORS = (toolkits.ToolLoadError, PayloadKeyError, StoreNotWritable, AgentConfigurationError)
"""What check_worker raises: each a usage error, said in one line (`setup_error`)."""


def check_worker(tools: Sequence[str]) -> list[str]:
    """Load a worker's tools (the demo's when none are named), and check what it would fail on
    later: the payload keys, the stores can be written (the demo's database is a store only
    where its tools are served: a user's worker does not create it), the messages' retention,
    the model calls' admission limits, the price file ($AGENT_PRICES). Before it connects, and
    long before a model is paid for. The names of the tools it serves."""
    served = toolkits.load_tools(list(tools) or [toolkits.DEMO_TOOLS])
    data_converter()
    check_stores(demo=toolkits.serves_demo())
    message_store.retention_hours_from_env()
    Admission.from_env()
    pricing.price_table()
    return served


def setup_error(error: BaseException) -> str:
    """One of SETUP_ERRORS as the line a person is shown."""
    return str(getattr(error, "message", None) or error)


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


async def serve(
    address: str,
    namespace: str,
    task_queue: str,
    tools: Sequence[str],
    mcp_config: McpConfig | None,
    *,
    sandbox: sandbox_runner.WorkerSandbox,
    deployment: WorkerDeploymentConfig | None,
) -> None:
    """The worker command's worker: serve runs until cancelled, or SIGTERM, saying in the log
    what (`tools`, check_worker's), on which stores, where, and which deployment version it is;
    traced as the OTEL_* variables say."""
    logging.info("serving %d tools: %s", len(tools), ", ".join(tools))
    logging.info("stores: %s", describe_stores(demo=toolkits.serves_demo()))
    if telemetry.configure_from_env():
        logging.info("tracing on (OTEL_* variables)")
    mcp = McpTools(mcp_config) if mcp_config is not None else None
    client = await connect(address, namespace)
    options: dict[str, Any] = {} if deployment is None else {"deployment_config": deployment}
    worker = build_worker(client, task_queue, mcp=mcp, sandbox=sandbox, **options)
    models = ", ".join(model_task_queue(task_queue, p) for p in ADMITTED_PROVIDERS)
    logging.info(
        f"worker on {address}, task queue {task_queue}; model calls on {models}; {sandbox} sandbox"
    )
    if deployment is not None:
        name, build = deployment.version.deployment_name, deployment.version.build_id
        runs = deployment.default_versioning_behavior.name.lower().replace("_", "-")
        logging.info(
            f"worker deployment {name}, build {build}, runs {runs}: `temporal worker deployment "
            f"set-current-version --deployment-name {name} --build-id {build}` sends new runs here"
        )
    for line in Admission.from_env().describe():
        logging.info("%s", line)
    # SIGTERM (docker stop, Kubernetes) stops the worker as Ctrl-C does: its workers shut down
    # gracefully rather than the process dying mid-task.
    serving_task, loop = asyncio.current_task(), asyncio.get_running_loop()
    if serving_task is not None:
        loop.add_signal_handler(signal.SIGTERM, serving_task.cancel)
    try:
        await worker.run()
    except asyncio.CancelledError:
        logging.info("stopping: the workers shut down")
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
