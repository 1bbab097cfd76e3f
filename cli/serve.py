"""`durable-agent serve`: the HTTP API (serving/http_api.py) and its browser console
(serving/console.py) on uvicorn. With --address it serves that cluster's runs; without, it starts
the embedded dev server and a worker as a self-contained run does, so one command gives a working
API and console offline. It binds 127.0.0.1 unless told otherwise, and every request needs the
token: $AGENT_API_TOKEN, or one made here and printed once, with a console link that carries it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import click
import uvicorn

from ..client.agent_client import AgentClient
from ..serving import http_api
from ..serving.command_line import Command, CommandLineError, parse, say
from ..serving.self_contained import SETUP_ERRORS, check_self_contained, self_contained, setup_error
from ..serving.streams import Streams, stream_bounds
from ..workflows.inputs import DEFAULT_TASK_QUEUE

DEFAULT_PORT = 8000
STOP_SECONDS = 10
"""How long a stopping server waits for the requests still being answered, then cancels them."""


class _Server(uvicorn.Server):
    """uvicorn's server, except that the SIGTERM or Ctrl-C that stops it is not raised again
    once it has stopped: uvicorn would end the process there, before the worker and the
    embedded dev server stop, and leave the dev server running without its parent. And it ends
    the open event streams as it stops, which uvicorn would wait for forever."""

    def __init__(self, config: uvicorn.Config, streams: Streams) -> None:
        super().__init__(config)
        self.streams = streams

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.streams.end_all()
        await super().shutdown(sockets)

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
        options = parse(command, argv, prog)
        token = http_api.api_token()
        options["stream_bounds"] = stream_bounds()
        if options["address"] is None:
            check_self_contained(options["tools"])
    except CommandLineError as stop:
        return int(stop.code or 0)
    except SETUP_ERRORS as error:
        say(f"{prog}: error: {setup_error(error)}")
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
        max_streams, max_run_streams = options["stream_bounds"]
        streams = Streams(max_streams=max_streams, max_run_streams=max_run_streams)
        app = http_api.create_app(agents, token=token.value, streams=streams)
        config = uvicorn.Config(
            app,
            host=options["host"],
            port=options["port"],
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=STOP_SECONDS,
        )
        server = _Server(config, streams)
        serving = asyncio.create_task(server.serve())
        while not server.started and not serving.done():
            await asyncio.sleep(0.05)
        if server.started:
            port = server.servers[0].sockets[0].getsockname()[1]
            say(f"HTTP API on http://{options['host']}:{port}/api (OpenAPI: /openapi.json)")
            for line in token.announcement(f"http://{_reachable(options['host'])}:{port}/"):
                say(line)
        await serving


def _reachable(host: str) -> str:
    """The host a browser on this machine opens for a server bound to `host`."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


@contextlib.asynccontextmanager
async def _agents(options: dict[str, Any]) -> AsyncIterator[AgentClient]:
    if options["address"] is not None:
        yield await AgentClient.connect(
            options["address"], namespace=options["namespace"], task_queue=options["task_queue"]
        )
        return
    async with self_contained(options["task_queue"]) as backend:
        say(f"embedded Temporal dev server; Web UI: {backend.web_ui}")
        yield backend.agents
