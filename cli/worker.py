"""Serve agent runs: the worker command, as `durable-agent worker` and `python worker.py` run it.
It parses, checks what it would serve, connects and hands over to serving/worker.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, get_args

import click

from ..activities import toolkits
from ..activities.mcp_config import MCP_CONFIG_VARIABLE, mcp_config_from
from ..client.agent_client import SearchAttributesNotRegistered
from ..serving import sandbox_runner as sandbox, worker as serving
from ..serving.command_line import Command, CommandLineError, exit_now, invoked_name, parse, say
from ..workflows.inputs import DEFAULT_TASK_QUEUE

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Names(click.ParamType):
    """Names, one a flag, or comma-separated in the environment variable."""

    name = "MODULE[:ATTR]"

    def split_envvar_value(self, rv: str) -> Sequence[str]:
        return [name.strip() for name in rv.split(",") if name.strip()]


_STRIPPED = {"token_normalize_func": str.strip}
"""Each choice is taken less the spaces around it, which a variable may have."""


def _env(name: str, variable: str, help: str, **attrs: Any) -> Any:
    return click.option(name, envvar=variable, show_envvar=True, help=help, **attrs)


@click.command("worker", cls=Command, context_settings=_STRIPPED)
@_env("--address", "TEMPORAL_ADDRESS", "Temporal frontend", default=serving.DEFAULT_ADDRESS)
@click.option("--namespace", default="default", help="the server's namespace")
@click.option("--task-queue", default=DEFAULT_TASK_QUEUE, help="the runs' task queue")
@_env(
    "--tools",
    toolkits.TOOLS_VARIABLE,
    "import MODULE, which registers tools, or the toolkit MODULE:ATTR names (or returns)",
    show_default="demo, the demo's",
    type=_Names(),
    multiple=True,
)
@_env("--mcp-config", MCP_CONFIG_VARIABLE, "MCP servers whose tools runs may use (docs/mcp.md)")
@_env(
    "--sandbox",
    sandbox.SANDBOX_VARIABLE,
    "how workflow code runs: stock is the SDK's own sandbox, which checks more and costs more "
    "CPU a run",
    default="fast",
    type=click.Choice(get_args(sandbox.WorkerSandbox)),
)
@_env(
    "--deployment-name",
    serving.DEPLOYMENT_NAME_VARIABLE,
    "Worker Deployment Versioning: this worker's deployment, with --build-id",
)
@_env("--build-id", serving.BUILD_ID_VARIABLE, "this worker's build, e.g. the release")
@_env(
    "--versioning",
    serving.VERSIONING_VARIABLE,
    "pinned: a run stays on its build; auto-upgrade: it moves",
    default="pinned",
    type=click.Choice(get_args(serving.Versioning)),
)
def command(**options: Any) -> dict[str, Any]:
    """Serve agent runs."""
    return options


def main(argv: Sequence[str] | None = None, *, prog: str = "worker.py") -> int:
    """Serve runs until interrupted: 0 on Ctrl-C or SIGTERM, 1 when the server cannot be used,
    2 for a bad command line or configuration (a malformed key, a store that cannot be written).
    `prog` names the command in its messages (`starter.py worker`)."""
    try:
        args = parse(command, argv, prog)
        served = serving.check_worker(args["tools"])  # nothing is served that would fail later
        mcp_config = mcp_config_from(args["mcp_config"])
        how = args["sandbox"]
        versions = (args["deployment_name"], args["build_id"], args["versioning"])
        deployment = serving.deployment_config(*versions, environ={})
    except CommandLineError as stop:
        return int(stop.code or 0)
    except serving.SETUP_ERRORS as error:
        say(f"{prog}: error: {serving.setup_error(error)}")
        return 2
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        where = (args["address"], args["namespace"], args["task_queue"])
        asyncio.run(serving.serve(*where, served, mcp_config, sandbox=how, deployment=deployment))
    except KeyboardInterrupt:
        return 0
    except (RuntimeError, SearchAttributesNotRegistered) as error:  # the latter says what to do
        logging.error("%s", getattr(error, "message", error))
        return 1
    return 0


if __name__ == "__main__":
    exit_now(main(prog=invoked_name()))
