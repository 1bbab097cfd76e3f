"""The HTTP API (http_api.py) and its browser console served on uvicorn, as `durable-agent serve`
runs it: over a cluster's runs (an address), or over a self-contained backend (self_contained.py)
that starts with it and stops with it. It announces where it listens, and the token's link."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import uvicorn

from ..client.agent_client import AgentClient
from . import http_api
from .command_line import say
from .self_contained import self_contained
from .served_agent import ServedAgent
from .streams import Streams

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


async def serve_api(
    address: str | None,
    namespace: str,
    task_queue: str,
    host: str,
    port: int,
    token: http_api.Token,
    stream_bounds: tuple[int, int],
    served: ServedAgent | None = None,
) -> None:
    """Serve the API on `host`:`port` (0: any free port) until SIGTERM or Ctrl-C, over the runs
    at `address`, or a self-contained backend's when None; streams within `stream_bounds` (a
    server's, a run's); the agent protocols offer `served`. RuntimeError when the server at
    `address` cannot be reached."""
    async with _agents(address, namespace, task_queue) as agents:
        max_streams, max_run_streams = stream_bounds
        streams = Streams(max_streams=max_streams, max_run_streams=max_run_streams)
        app = http_api.create_app(agents, token=token.value, streams=streams, served=served)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
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
            say(f"HTTP API on http://{host}:{port}/api (OpenAPI: /openapi.json)")
            for line in token.announcement(f"http://{_reachable(host)}:{port}/"):
                say(line)
        await serving


def _reachable(host: str) -> str:
    """The host a browser on this machine opens for a server bound to `host`."""
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


@contextlib.asynccontextmanager
async def _agents(
    address: str | None, namespace: str, task_queue: str
) -> AsyncIterator[AgentClient]:
    if address is not None:
        yield await AgentClient.connect(address, namespace=namespace, task_queue=task_queue)
        return
    async with self_contained(task_queue) as backend:
        say(f"embedded Temporal dev server; Web UI: {backend.web_ui}")
        yield backend.agents
