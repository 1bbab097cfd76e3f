"""A stdio MCP server that dies while idle is started again before anyone calls it unreachable:
the next run, which needs it or not, goes on. One that cannot be brought back fails only the runs
that need it, typed and by name. Real server processes, killed with SIGKILL."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent.activities import mcp_sessions
from tests.helpers import call, eventually, scripted_input, turn
from tests.test_mcp import (
    FAST_RETRY,
    SECRET,
    SERVER,
    config_of,
    journal_of,
    mcp_worker,
    run_with,
    stdio_server,
)

RESTARTED = "restarting it in"


@pytest.fixture(autouse=True)
def secret_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_SECRET", SECRET)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "journal.jsonl"


def time_server() -> dict[str, Any]:
    """mcp-server-time, started as its README says."""
    return {
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "retry": FAST_RETRY,
    }


def children_running(marker: str) -> list[int]:
    """This process's live child processes whose command line has `marker` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # it ended while we looked
        # After the command's name in parentheses: state, then parent pid.
        state, parent = stat.rpartition(")")[2].split()[:2]
        if int(parent) == os.getpid() and state != "Z" and marker in command:
            found.append(int(entry.name))
    return found


async def kill_server(marker: str) -> int:
    """SIGKILL the one running server process; returns once it is dead."""
    [pid] = children_running(marker)
    os.kill(pid, signal.SIGKILL)
    await eventually(lambda: pid not in children_running(marker), what=f"process {pid} to die")
    return pid


def restart_lines(caplog: pytest.LogCaptureFixture, server: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == mcp_sessions.__name__ and r.getMessage().startswith(f"MCP server {server}: ")
        and RESTARTED in r.getMessage()
    ]  # fmt: skip


async def test_an_idle_server_that_died_is_restarted_for_the_next_run(
    client: Client, task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's case: mcp-server-time dies while idle; the next run, which calls none of its
    tools, and the one after, which does, both go on, each on a fresh process."""
    caplog.set_level(logging.INFO, logger=mcp_sessions.__name__)
    config = config_of({"time": time_server()}, tmp_path)
    quiet = [turn(text="nothing to look up")]
    asks_the_time = [turn(call("time__get_current_time", "c1", timezone="UTC")), turn(text="ok")]
    async with mcp_worker(client, task_queue, config):
        first = await run_with(client, task_queue, scripted_input(quiet))
        assert first.result is not None, first.error
        killed = await kill_server("mcp_server_time")

        second = await run_with(client, task_queue, scripted_input(quiet))
        assert second.result is not None, second.error
        assert second.result.tool_notices == []
        [restarted] = children_running("mcp_server_time")
        assert restarted != killed

        await kill_server("mcp_server_time")
        third = await run_with(client, task_queue, scripted_input(asks_the_time))
        assert third.result is not None, third.error
        assert '"timezone": "UTC"' in third.tool_results()["c1"]
    # One line per restart, naming the server and why: the worker saw the process exit, or a
    # request found its connection closed first (the run started at once after the kill).
    lines = restart_lines(caplog, "time")
    assert len(lines) == 2, lines
    assert all(
        line.startswith(("MCP server time: its process exited; restarting it in 0.25 s",
                         "MCP server time: its connection closed; restarting it in 0.25 s"))
        for line in lines
    ), lines  # fmt: skip


@pytest.mark.parametrize("optional", [False, True], ids=["required", "optional"])
async def test_a_server_that_cannot_be_brought_back_fails_only_the_runs_that_need_it(
    client: Client,
    task_queue: str,
    journal: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    optional: bool,
) -> None:
    """Its restarts all fail (it exits as it starts): a run that needs it fails, typed and by
    name, or goes on without it when it is optional; a run that needs only another server goes
    on; once it can start again, the next run that needs it starts it."""
    caplog.set_level(logging.INFO, logger=mcp_sessions.__name__)
    cannot_start = tmp_path / "down"
    shop = stdio_server(journal, optional=optional)
    shop["env"]["MCP_TEST_DOWN_MARKER"] = str(cannot_start)
    config = config_of({"shop": shop, "time": time_server()}, tmp_path)
    quiet = [turn(text="nothing to look up")]
    asks_the_time = [turn(call("time__get_current_time", "c1", timezone="UTC")), turn(text="ok")]
    async with mcp_worker(client, task_queue, config):
        first = await run_with(client, task_queue, scripted_input(quiet))
        assert first.result is not None, first.error
        cannot_start.touch()
        await kill_server(str(SERVER))

        # Started as the restarts begin: it waits for them, and they fail.
        needs_it = await run_with(client, task_queue, scripted_input(quiet))
        reason = "MCP server shop is unreachable: it exited and 3 restarts failed (the last: "
        if optional:
            assert needs_it.result is not None, needs_it.error
            [notice] = needs_it.result.tool_notices
            assert notice.startswith(
                "MCP server shop (optional) is unreachable, so its tools are not offered: it "
                "exited and 3 restarts failed (the last: "
            ), notice
        else:
            assert needs_it.failure.type == "AgentConfigurationError"
            assert needs_it.failure.message.startswith(reason), needs_it.failure.message
            assert "\n" not in needs_it.failure.message
        lines = restart_lines(caplog, "shop")
        assert [line.rpartition("(")[2] for line in lines] == [
            "restart 1 of 3)",
            "restart 2 of 3)",
            "restart 3 of 3)",
        ], lines
        assert lines[1].startswith("MCP server shop: restart 1 failed ("), lines
        assert lines[2].startswith("MCP server shop: restart 2 failed ("), lines
        assert len([e for e in journal_of(journal) if "refused_to_start" in e]) == 3

        # A run that needs only the other server does not notice.
        other = await run_with(
            client, task_queue, scripted_input(asks_the_time, tools=["time__get_current_time"])
        )
        assert other.result is not None, other.error
        assert other.result.tool_notices == []

        cannot_start.unlink()
        back = await run_with(client, task_queue, scripted_input(quiet))
        assert back.result is not None, back.error
        assert back.result.tool_notices == []
