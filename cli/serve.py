"""`durable-agent serve`: the HTTP API (serving/http_api.py) on uvicorn. With --address it
serves that cluster's runs; without, it starts the embedded dev server and a worker as a
self-contained run does, so one command gives a working API offline. It binds 127.0.0.1 unless
told otherwise, and every request needs the token: $AGENT_API_TOKEN, or one made here and
printed once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import click
import uvicorn

from ..activities import toolkits
from ..activities.admission import Admission
from ..activities.store_check import StoreNotWritable, check_stores
from ..client.agent_client import AgentClient
from ..serving import http_api
from ..serving.dev_server import embedded_dev_server, free_port
from ..serving.worker import build_worker
from ..workflows.errors import AgentConfigurationError
from ..workflows.inputs import DEFAULT_TASK_QUEUE
from .plumbing import Command, CommandLineError, parse, say

DEFAULT_PORT = 8000


class _Server(uvicorn.Server):
    """uvicorn's server, except that the SIGTERM or Ctrl-C that stops it is not raised again
    once it has stopped: uvicorn would end the process there, before the worker and the
    embedded dev server stop, and leave the dev server running without its parent."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            self._captured_signals.clear()


@click.command(
    "serve", cls=Command, help="Serve the HTTP API (docs/http-api.md) until interrupted."
)
@click.option("--address", envvar="TEMPORAL_ADDRESS", show_envvar=True, help="Temporal frontend")
@click.option("--namespace", default="default", help="the server's namespace")
@click.option("--task-queue", default=DEFAULT_TASK_QUEUE, help="the runs' task queue")
@click.option("--host", default="127.0.0.1", help="the interface to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, help="0: any free")
@click.option("--tools", multiple=True, help="self-contained: the worker's, as `worker --tools`")
def command(**options: Any) -> dict[str, Any]:
    if options["tools"] and options["address"]:
        raise click.UsageError(
            "--tools is for the embedded worker; with --address, give it to the worker"
        )
    return options


def main(argv: Sequence[str], *, prog: str = "starter.py serve") -> int:
    try:
        options = parse(command, prog, argv)
        token = http_api.api_token()
        if options["address"] is None:
            toolkits.load_tools(options["tools"] or [toolkits.DEMO_TOOLS])
            check_stores()
            Admission.from_env()
    except CommandLineError as stop:
        return int(stop.code or 0)
    except (toolkits.ToolLoadError, StoreNotWritable, AgentConfigurationError) as error:
        say(f"{prog}: error: {getattr(error, 'message', None) or error}")
        return 2
    try:
        asyncio.run(_serve(options, token))
    except KeyboardInterrupt:
        return 0
    except RuntimeError as error:  # the server cannot be reached
        say(f"{prog}: {error}")
        return 1
    return 0


async def _serve(options: dict[str, Any], token: http_api.Token) -> None:
    async with _agents(options) as agents:
        app = http_api.create_app(agents, token=token.value)
        config = uvicorn.Config(
            app, host=options["host"], port=options["port"], log_level="warning", lifespan="off"
        )
        server = _Server(config)
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            say(f"HTTP API on http://{options['host']}:{port}/api (OpenAPI: /openapi.json)")
            say(token.announcement())
        await serving


@contextlib.asynccontextmanager
async def _agents(options: dict[str, Any]) -> AsyncIterator[AgentClient]:
    if options["address"] is not None:
        yield await AgentClient.connect(
            options["address"], namespace=options["namespace"], task_queue=options["task_queue"]
        )
        return
    ui_port = free_port()
    async with embedded_dev_server(ui_port=ui_port) as env:
        say(f"embedded Temporal dev server; Web UI: http://127.0.0.1:{ui_port}")
        async with build_worker(env.client, options["task_queue"]):
            yield AgentClient(env.client, options["task_queue"])
