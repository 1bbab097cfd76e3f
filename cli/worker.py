"""Serve agent runs: the worker command, as `durable-agent worker` and `python worker.py` run it.

    durable-agent worker [--address HOST:PORT] [--namespace NS] [--task-queue QUEUE]
                         [--tools MODULE[:ATTR] ...] [--mcp-config FILE]
                         [--sandbox fast|stock]
                         [--deployment-name NAME --build-id ID [--versioning pinned|auto-upgrade]]

It parses, checks what it would serve, connects and hands over to serving/worker.py.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any, get_args

import click
from temporalio.worker import WorkerDeploymentConfig

from ..activities import message_store, telemetry, toolkits
from ..activities.admission import Admission
from ..activities.mcp_config import MCP_CONFIG_VARIABLE, mcp_config_from
from ..activities.mcp_tools import McpTools
from ..activities.store_check import StoreNotWritable, check_stores, describe_stores
from ..client.agent_client import SearchAttributesNotRegistered
from ..encryption import payload_codec
from ..serving import sandbox_runner
from ..serving.worker import (
    BUILD_ID_VARIABLE,
    DEFAULT_ADDRESS,
    DEPLOYMENT_NAME_VARIABLE,
    VERSIONING_VARIABLE,
    Versioning,
    build_worker,
    connect,
    deployment_config,
)
from ..workflows.errors import AgentConfigurationError
from ..workflows.inputs import DEFAULT_TASK_QUEUE
from ..workflows.model_gateway import model_task_queue
from ..workflows.providers import ADMITTED_PROVIDERS
from .plumbing import Command, CommandLineError, exit_now, parse


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


class _Names(click.ParamType):
    """Names, one a flag, or comma-separated in the environment variable."""

    name = "MODULE[:ATTR]"

    def split_envvar_value(self, rv: str) -> Sequence[str]:
        return [name.strip() for name in rv.split(",") if name.strip()]


class _Choice(click.Choice[str]):
    """One of the choices, with the spaces around it that a variable may have left out."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(value.strip(), param, ctx)


def _env(name: str, variable: str, help: str, **attrs: Any) -> click.Option:
    return click.Option([name], envvar=variable, show_envvar=True, help=help, **attrs)


WORKER = Command(
    "worker",
    help="Serve agent runs.",
    params=[
        _env("--address", "TEMPORAL_ADDRESS", "Temporal frontend", default=DEFAULT_ADDRESS),
        click.Option(["--namespace"], default="default", help="the server's namespace"),
        click.Option(["--task-queue"], default=DEFAULT_TASK_QUEUE, help="the runs' task queue"),
        _env(
            "--tools",
            toolkits.TOOLS_VARIABLE,
            "import MODULE, which registers tools, or the toolkit MODULE:ATTR names (or returns); "
            "`demo`: the demo's, the default",
            type=_Names(),
            multiple=True,
        ),
        _env("--mcp-config", MCP_CONFIG_VARIABLE, "MCP servers whose tools runs may use (FILE)"),
        _env(
            "--sandbox",
            sandbox_runner.SANDBOX_VARIABLE,
            "how workflow code runs: stock is the SDK's own sandbox, which checks more and costs "
            "more CPU a run  [default: fast]",
            type=_Choice(get_args(sandbox_runner.WorkerSandbox)),
        ),
        _env(
            "--deployment-name",
            DEPLOYMENT_NAME_VARIABLE,
            "Worker Deployment Versioning: this worker's deployment, with --build-id",
        ),
        _env("--build-id", BUILD_ID_VARIABLE, "this worker's build, e.g. the release"),
        _env(
            "--versioning",
            VERSIONING_VARIABLE,
            "pinned: a run stays on its build; auto-upgrade: it moves  [default: pinned]",
            type=_Choice(get_args(Versioning)),
        ),
    ],
    callback=lambda **options: options,
)


def main(argv: Sequence[str] | None = None, *, prog: str = "worker.py") -> int:
    """Serve runs until interrupted: 0 on Ctrl-C or SIGTERM, 1 when the server cannot be used,
    2 for a bad command line or configuration (a malformed key, a store that cannot be written).
    `prog` names the command in its messages (`starter.py worker`)."""
    try:
        args = parse(WORKER, prog, sys.argv[1:] if argv is None else argv)
    except CommandLineError as stop:
        return int(stop.code or 0)
    try:
        served = toolkits.load_tools(args["tools"] or [toolkits.DEMO_TOOLS])
    except toolkits.ToolLoadError as error:
        sys.stderr.write(f"{prog}: error: {error}\n")
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        payload_codec.data_converter()  # a malformed key configuration is a usage error
        check_stores()  # before connecting: nothing is served that could not be stored
        message_store.retention_hours_from_env()
        Admission.from_env()  # the model calls' limits
        mcp_config = mcp_config_from(args["mcp_config"])
        sandbox = args["sandbox"] or sandbox_runner.sandbox_from_env()
        deployment = deployment_config(
            args["deployment_name"], args["build_id"], args["versioning"], environ={}
        )
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
        where = (args["address"], args["namespace"], args["task_queue"])
        asyncio.run(_serve(*where, mcp, sandbox, deployment))
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
