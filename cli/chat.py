"""The dev server of a self-contained conversation, in a session of its own.

At a terminal, Ctrl-C sends SIGINT to the whole foreground process group. The embedded dev
server (worker.embedded_dev_server) is in ours, so the Ctrl-C that should interrupt a turn
would stop the server under the conversation. This one is started in a new session: Ctrl-C
reaches only this process, and the server stops when the conversation does. It is started
as the embedded one is: in memory, unpaced, with the search attributes, and its banner kept off
stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

from temporalio.client import Client

from ..activities import telemetry
from ..serving.dev_server import UNPACED_DEV_SERVER_ARGS, free_port, temporal_binary
from ..serving.worker import connect
from ..workflows.status import SEARCH_ATTRIBUTES

START_SECONDS = 30.0
STOP_SECONDS = 10.0


@dataclass(frozen=True)
class DetachedServer:
    client: Client
    address: str


@contextlib.asynccontextmanager
async def detached_dev_server(*, ui_port: int) -> AsyncIterator[DetachedServer]:
    port = free_port()
    address = f"127.0.0.1:{port}"
    command = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port)]
    command += ["--ui-port", str(ui_port), "--log-level", "error", *UNPACED_DEV_SERVER_ARGS]
    for key in SEARCH_ATTRIBUTES:
        command += ["--search-attribute", f"{key.name}={key._metadata_type}"]
    with telemetry.hidden_from_child_processes():
        server = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr,
            start_new_session=True,
        )
    try:
        client = await _connect(address, server)
        yield DetachedServer(client, address)
    finally:
        server.terminate()
        try:
            await asyncio.to_thread(server.wait, STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            await asyncio.to_thread(server.wait)


async def _connect(address: str, server: subprocess.Popen[bytes]) -> Client:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_SECONDS
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"the dev server exited with status {server.returncode}")
        try:
            return await connect(address)
        except RuntimeError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)
