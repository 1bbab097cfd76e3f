"""One live MCP connection per server and worker, started when first needed and reused.

A stdio server is one process for the worker's life; an HTTP server one client session. A stdio
server whose process exits (it crashed, it was killed, it ended itself while idle) is started
again at once, in the background, with a short backoff (`RESTART_DELAYS`): the next run finds it
up, and a run or call that asks for it meanwhile waits for the restart instead of failing on the
dead connection. When a connection breaks in another way (a request timed out, the HTTP server
dropped the session) the call that found out retires it and fails; its retry, on this worker or
another, starts a fresh one.

The SDK's transports are anyio task groups, which must be entered and left by the same task: each
connection is owned by a task of its own that holds the client open until it is retired, and
the calls (other tasks on the same event loop) only send requests through it. The same shape as
temporalio-mcp's connection records (`temporalio/mcp/_pool.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from .mcp_config import McpServerConfig

logger = logging.getLogger(__name__)

CLOSE_SECONDS = 5.0
"""How long closing a connection (a stdio server's process exiting) may take."""
RESTART_DELAYS = (0.25, 0.5, 1.0)
"""Seconds to wait before each restart of a stdio server whose process exited: three restarts,
each waiting twice as long as the one before. A server that crashes as it starts is not
restarted in a tight loop, and a run that waits for the restarts at its start waits under 2 s
of delays, well within the 8 s its listing may take (`mcp_tools.LIST_SECONDS`)."""
RESTART_SECONDS = 10.0
"""How long one restart may take to connect: a restart that hangs must not hold back, forever,
every run and call that waits for it."""

_Item = TypeVar("_Item")
Describe = Callable[[BaseException], str]
"""One line for an error, with the config's secrets blanked (`McpTools._reason`)."""


class McpServerGone(Exception):
    """A stdio server's process exited and could not be started again."""


class _EndSignalling(Generic[_Item]):
    """A transport's read stream that sets `ended` when it ends. A stdio server's output ends
    when its process exits, and the SDK's client shows no other sign of it until a request
    fails on the dead connection."""

    def __init__(self, stream: Any, ended: asyncio.Event) -> None:
        self._stream = stream
        self._ended = ended

    def __getattr__(self, name: str) -> Any:
        # What the SDK reads from a stream beyond its protocol (`last_context`) passes through.
        return getattr(self._stream, name)

    async def receive(self) -> _Item:
        try:
            item: _Item = await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise
        return item

    def __aiter__(self) -> _EndSignalling[_Item]:
        return self

    async def __anext__(self) -> _Item:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _EndSignalling[_Item]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def _signalling_end(transport: Transport, ended: asyncio.Event) -> AsyncIterator[Any]:
    async with transport as (read_stream, write_stream):
        yield _EndSignalling[Any](read_stream, ended), write_stream


@asynccontextmanager
async def open_client(
    server: McpServerConfig, output_ended: asyncio.Event | None = None
) -> AsyncIterator[Client]:
    """A connected, initialised client of one server (no response cache: every listing asks).
    `output_ended` is set when a stdio server's output ends (its process exited)."""
    if server.command is not None:
        parameters = StdioServerParameters(
            command=server.command, args=list(server.args), env=dict(server.env), cwd=server.cwd
        )
        transport: Transport = stdio_client(parameters)
        if output_ended is not None:
            transport = _signalling_end(transport, output_ended)
        async with Client(transport, cache=None) as client:
            yield client
        return
    assert server.url is not None
    async with (
        create_mcp_http_client(headers=dict(server.headers)) as http,
        Client(streamable_http_client(server.url, http_client=http), cache=None) as client,
    ):
        yield client


class _Owned:
    """A client held open by its own task until `stop`, or until its stdio server's process
    exits: then `on_exit` is called, once, while the dead connection closes."""

    def __init__(self, server: McpServerConfig, on_exit: Callable[[_Owned], None]) -> None:
        self._ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._output_ended = asyncio.Event()
        self._on_exit = on_exit
        self.task = asyncio.create_task(self._own(server))

    async def _own(self, server: McpServerConfig) -> None:
        try:
            async with open_client(server, self._output_ended) as client:
                self._ready.set_result(client)
                stopped = asyncio.ensure_future(self._stop.wait())
                ended = asyncio.ensure_future(self._output_ended.wait())
                try:
                    await asyncio.wait({stopped, ended}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopped.cancel()
                    ended.cancel()
                if self.exited:
                    self._on_exit(self)
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
    def exited(self) -> bool:
        """Its server's output ended after it connected, and not because it was stopped: the
        process is gone. (One that never connected failed to start; its caller was told.)"""
        ready = self._ready
        connected = ready.done() and not ready.cancelled() and ready.exception() is None
        return connected and self._output_ended.is_set() and not self._stop.is_set()

    @property
    def ended(self) -> bool:
        return self.task.done() or self.exited

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

    def __init__(self, name: str, server: McpServerConfig, describe: Describe = repr) -> None:
        self.name = name
        self.server = server
        self._describe = describe
        self._owned: _Owned | None = None
        self._restarting: asyncio.Task[_Owned] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._closed = False

    async def client(self) -> Client:
        """The live client, connecting (or reconnecting) first when there is none. While a
        stdio server is being restarted, this waits for the restart; raises McpServerGone when
        its restarts failed."""
        owned = self._owned
        if owned is not None and owned.exited:
            self._restart(owned, "its process exited")
        restarting = self._restarting
        if restarting is not None and not restarting.done():
            return await (await asyncio.shield(restarting)).client()
        owned = self._owned
        if owned is None or owned.ended:
            if owned is not None:
                self._retire(owned)
            owned = self._owned = self._owned_client()
        try:
            return await owned.client()
        except BaseException:
            if self._owned is owned:
                self._retire(owned)
                self._owned = None
            raise

    def retire(self, client: Client, *, closed: bool = False) -> None:
        """Drop this client (its connection broke): the next call starts a new one. `closed`:
        the connection was found closed, which for a stdio server means that its process
        exited, so it is restarted at once."""
        owned = self._owned
        if owned is None or not owned.holds(client):
            return  # already replaced
        if closed and self.server.command is not None:
            self._restart(owned, "its connection closed")
            return
        logger.warning("MCP server %s: connection lost; the next call reconnects", self.name)
        self._retire(owned)
        self._owned = None

    def _owned_client(self) -> _Owned:
        return _Owned(self.server, on_exit=lambda owned: self._restart(owned, "its process exited"))

    def _restart(self, exited: _Owned, why: str) -> None:
        """Start the restarts of a stdio server whose process is gone, unless they started."""
        if self._closed or self._owned is not exited:
            return
        if self._restarting is not None and not self._restarting.done():
            return
        self._retire(exited)
        self._owned = None
        self._restarting = asyncio.create_task(self._restarted(why))
        # Its failure goes to the runs and calls that wait for it; none may wait.
        self._restarting.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _restarted(self, why: str) -> _Owned:
        failure = ""
        for number, delay in enumerate(RESTART_DELAYS, start=1):
            logger.warning(
                "MCP server %s: %s; restarting it in %g s (restart %d of %d)",
                self.name, why, delay, number, len(RESTART_DELAYS),
            )  # fmt: skip
            await asyncio.sleep(delay)
            owned = self._owned = self._owned_client()
            try:
                async with asyncio.timeout(RESTART_SECONDS):
                    await owned.client()
            except Exception as error:
                if self._owned is owned:
                    self._owned = None
                self._retire(owned)
                failure = self._describe(error)
                why = f"restart {number} failed ({failure})"
                continue
            logger.info("MCP server %s: restarted (restart %d)", self.name, number)
            return owned
        gone = f"it exited and {len(RESTART_DELAYS)} restarts failed (the last: {failure})"
        logger.warning(
            "MCP server %s: %s. The next run or call that needs it starts it again",
            self.name, gone,
        )  # fmt: skip
        raise McpServerGone(gone)

    def _retire(self, owned: _Owned) -> None:
        task = asyncio.create_task(owned.stop())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        self._closed = True
        if self._restarting is not None:
            self._restarting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._restarting
        if self._owned is not None:
            self._retire(self._owned)
            self._owned = None
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
