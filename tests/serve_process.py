"""`durable-agent serve` in a subprocess, as its users start it, for the tests of the HTTP API
and of the console: it says where it listens, then the token and the console's link."""

from __future__ import annotations

import asyncio
import os
import re
import sysconfig
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2 as httpx

CLI = str(Path(sysconfig.get_path("scripts")) / "durable-agent")
TOKEN = "test-token-" + uuid.uuid4().hex
LISTENING = re.compile(r"HTTP API on (http://\S+)/api")
CONSOLE = re.compile(r"^console: (http://\S+)")


@asynccontextmanager
async def serving(*words: str, token: str | None = TOKEN) -> AsyncIterator[httpx.AsyncClient]:
    """`durable-agent serve WORDS --port 0`, and a client of it that sends the token."""
    env = {k: v for k, v in os.environ.items() if k != "AGENT_API_TOKEN"}
    if token is not None:
        env["AGENT_API_TOKEN"] = token
    server = await asyncio.create_subprocess_exec(
        CLI, "serve", *words, "--port", "0", env=env, stderr=asyncio.subprocess.PIPE
    )
    assert server.stderr is not None
    said: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not (found := LISTENING.search("".join(said))) or not CONSOLE.search(said[-1]):
                line = await server.stderr.readline()
                assert line, "".join(said)
                said.append(line.decode())
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(base_url=found.group(1), headers=headers) as http:
            http.said = said  # type: ignore[attr-defined]
            http.process = server  # type: ignore[attr-defined]
            yield http
    finally:
        if server.returncode is None:
            server.terminate()
        await server.communicate()  # to its end, closing the pipe
    # SIGTERM stops it as a deploy does: cleanly, its worker and embedded dev server with it
    # (raised again by uvicorn, it would leave the dev server running: status -15).
    assert server.returncode == 0, "".join(said)
