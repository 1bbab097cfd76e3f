"""A small MCP server for the tests, on the real SDK (MCPServer, mcp 2's FastMCP).

    python tests/mcp_server_for_tests.py stdio
    python tests/mcp_server_for_tests.py http PORT

It writes what it was asked to a journal (MCP_TEST_JOURNAL, one JSON line a call), so that a
test can see which calls reached it, with which `_meta`, and whether it was asked anything at all:
a side-effecting tool's entries count its applications, since this server ignores idempotency
keys, as most servers do.
While the file MCP_TEST_DOWN_MARKER names exists, it exits as soon as it starts: a server that
cannot be brought back. With MCP_TEST_SLOW_LISTING set, it takes a minute to list its tools.
It checks its secret (MCP_TEST_TOKEN in its environment over stdio, the Authorization header
over HTTP) against MCP_TEST_EXPECTED_TOKEN, and never says it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import Tool, ToolAnnotations


class _TestServer(MCPServer):
    async def list_tools(self) -> list[Tool]:
        """With MCP_TEST_SLOW_LISTING set, a listing answers only after SLOW_SECONDS."""
        if os.environ.get("MCP_TEST_SLOW_LISTING"):
            await anyio.sleep(SLOW_SECONDS)
        return await super().list_tools()


server = _TestServer("tests")


def _journal(entry: dict[str, Any]) -> None:
    path = os.environ.get("MCP_TEST_JOURNAL")
    if path:
        with open(path, "a", encoding="utf-8") as journal:
            journal.write(json.dumps(entry) + "\n")


SLOW_SECONDS = 60.0
"""How long the first call of a slow tool takes: longer than any test's attempt timeout."""


def _journalled(tool: str) -> int:
    path = os.environ.get("MCP_TEST_JOURNAL")
    if not path or not Path(path).exists():
        return 0
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return sum(json.loads(line).get("tool") == tool for line in lines)


async def _slow_the_first_time(tool: str) -> None:
    """The first call of `tool` (already journalled, so it has taken effect) outlasts its
    attempt's timeout; every later one answers at once."""
    if _journalled(tool) == 1:
        await anyio.sleep(SLOW_SECONDS)


def _authorised(ctx: Context) -> bool:
    expected = os.environ.get("MCP_TEST_EXPECTED_TOKEN")
    if expected is None:
        return True
    headers = ctx.headers
    if headers is not None:
        return headers.get("authorization") == f"Bearer {expected}"
    return os.environ.get("MCP_TEST_TOKEN") == expected


def _called(tool: str, ctx: Context, **arguments: Any) -> None:
    meta = ctx.request_context.meta or {}
    _journal({"tool": tool, "arguments": arguments, "meta": dict(meta), "pid": os.getpid()})
    if not _authorised(ctx):
        raise PermissionError("the token is wrong")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key: str, ctx: Context) -> str:
    """Look up a key in the test catalogue; returns one line."""
    _called("lookup", ctx, key=key)
    return f"{key}: found"


@server.tool()
def record(note: str, ctx: Context) -> str:
    """Record a note (changes data)."""
    _called("record", ctx, note=note)
    return f"recorded {note}"


@server.tool()
async def charge(amount: int, ctx: Context) -> str:
    """Charge an amount (changes data, and again on every call: no de-duplication). The first
    charge is applied at once and answered only after SLOW_SECONDS."""
    _called("charge", ctx, amount=amount)
    await _slow_the_first_time("charge")
    return f"charged {amount}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def quote(amount: int, ctx: Context) -> str:
    """A price quote (read-only). The first one answers only after SLOW_SECONDS."""
    _called("quote", ctx, amount=amount)
    await _slow_the_first_time("quote")
    return f"quoted {amount}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def refuse(reason: str, ctx: Context) -> str:
    """Always fails, with the reason given (an isError result)."""
    _called("refuse", ctx, reason=reason)
    raise ToolError(f"refused: {reason}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def stats(ctx: Context) -> dict[str, int]:
    """Structured content."""
    _called("stats", ctx)
    return {"orders": 3, "refunds": 1}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def crash_once(ctx: Context) -> str:
    """The first call kills this server's process (MCP_TEST_CRASH_MARKER marks it done)."""
    _called("crash_once", ctx)
    marker = Path(os.environ["MCP_TEST_CRASH_MARKER"])
    if not marker.exists():
        marker.write_text("crashed")
        os._exit(3)
    return "survived"


def main(argv: list[str]) -> None:
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        down = os.environ.get("MCP_TEST_DOWN_MARKER")
        if down and Path(down).exists():
            _journal({"refused_to_start": os.getpid()})
            sys.exit(1)
        _journal({"started": os.getpid()})
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
