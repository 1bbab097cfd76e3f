"""One live MCP connection per server and worker, started when first needed and reused.

A stdio server is one process for the worker's life; an HTTP server one client session. When a
connection breaks (the process died, the server dropped the session) the call that found out
retires it and fails; its retry, on this worker or another, starts a fresh one.

The SDK's transports are anyio task groups, which must be entered and left by the same task: each
connection is owned by a task of its own that holds the client open until it is retired, and
the calls (other tasks on the same event loop) only send requests through it. The same shape as
temporalio-mcp's connection records (`temporalio/mcp/_pool.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from durable_agent.activities.mcp_config import McpServerConfig

logger = logging.getLogger(__name__)

CLOSE_SECONDS = 5.0
"""How long closing a connection (a stdio server's process exiting) may take."""


@asynccontextmanager
async def open_client(server: McpServerConfig) -> AsyncIterator[Client]:
    """A connected, initialised client of one server (no response cache: every listing asks)."""
    if server.command is not None:
        parameters = StdioServerParameters(
            command=server.command, args=list(server.args), env=dict(server.env), cwd=server.cwd
        )
        async with Client(stdio_client(parameters), cache=None) as client:
            yield client
        return
    assert server.url is not None
    async with (
        create_mcp_http_client(headers=dict(server.headers)) as http,
        Client(streamable_http_client(server.url, http_client=http), cache=None) as client,
    ):
        yield client


class _Owned:
    """A client held open by its own task until `stop`."""

    def __init__(self, server: McpServerConfig) -> None:
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(self._own(server))

    async def _own(self, server: McpServerConfig) -> None:
        try:
            async with open_client(server) as client:
                self._ready.set_result(client)
                await self._stop.wait()
        except BaseException as error:
            if not self._ready.done():
                self._ready.set_exception(error)
            if isinstance(error, asyncio.CancelledError):
                raise

    async def client(self) -> Client:
        return await asyncio.shield(self._ready)

    def holds(self, client: Client) -> bool:
        ready = self._ready
        if not ready.done() or ready.cancelled() or ready.exception() is not None:
            return False
        return ready.result() is client

    @property
    def ended(self) -> bool:
        return self.task.done()

    async def stop(self) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.task), CLOSE_SECONDS)
        except (TimeoutError, Exception):
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # retrieved: a failed start was reported to its caller


class McpConnection:
    """The worker's connection to one server."""

    def __init__(self, name: str, server: McpServerConfig) -> None:
        self.name = name
        self.server = server
        self._owned: _Owned | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    async def client(self) -> Client:
        """The live client, connecting (or reconnecting) first when there is none."""
        owned = self._owned
        if owned is None or owned.ended:
            if owned is not None:
                self._retire(owned)
            owned = self._owned = _Owned(self.server)
        try:
            return await owned.client()
        except BaseException:
            if self._owned is owned:
                self._retire(owned)
                self._owned = None
            raise

    def retire(self, client: Client) -> None:
        """Drop this client (its connection broke): the next call starts a new one."""
        owned = self._owned
        if owned is not None and owned.holds(client):
            logger.warning("MCP server %s: connection lost; the next call reconnects", self.name)
            self._retire(owned)
            self._owned = None

    def _retire(self, owned: _Owned) -> None:
        task = asyncio.create_task(owned.stop())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        if self._owned is not None:
            self._retire(self._owned)
            self._owned = None
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
