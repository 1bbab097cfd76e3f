"""Conversations from the command line, in a subprocess where people meet it: `chat` at a
terminal (self-contained), and `--conversation`, `send`, `interrupt` and `end` through
--address against the session's dev server, served by the test's worker."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import starter
from durable_agent.serving.worker import build_worker

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."
HIDDEN = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


def cli_env(db: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in HIDDEN}
    env["AGENT_DEMO_DB"] = str(db)
    return env


async def cli(*args: str, db: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=REPO,
        env=cli_env(db),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def start_chat(*args: str, db: Path, **options: Any) -> asyncio.subprocess.Process:
    """`starter.py chat ARGS...` at a terminal of pipes: stdin to type into, stdout and stderr
    to read."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "chat",
        *args,
        cwd=REPO,
        env=cli_env(db),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        **options,
    )


async def test_a_conversation_through_a_server_with_send_and_end(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    address = temporal_env.client.service_client.config.target_host
    on = ("--address", address)
    async with build_worker(temporal_env.client, task_queue):
        code, out, err = await cli(
            PROMPT, "--conversation", *on, "--task-queue", task_queue, db=tmp_path / "demo.db"
        )
        assert code == 0, err
        assert "14:20" in out
        match = re.search(r"workflow (agent-\w+) started", err)
        assert match, err
        workflow_id = match.group(1)
        assert f"starter.py send {workflow_id} TEXT --address {address} [--wait]" in err

        code, out, err = await cli("send", workflow_id, "thanks!", "--wait", *on, db=tmp_path)
        assert code == 0, err
        assert "scripted demo" in out and "turn 2 answered" in err

        code, out, err = await cli("interrupt", workflow_id, *on, db=tmp_path)
        assert code == 1 and "no turn is working" in err

        code, out, err = await cli("send", workflow_id, " ", *on, db=tmp_path)
        assert code == 2 and "the message is empty" in err

        code, out, err = await cli("end", workflow_id, *on, "--json", db=tmp_path)
        assert code == 0, err
        ended = json.loads(out)
        assert ended["ended"] == "ended by the user"
        assert [t["outcome"] for t in ended["turns"]] == ["answered", "answered"]

        code, out, err = await cli("send", workflow_id, "anyone?", *on, db=tmp_path)
        assert code == 1, err


async def test_chat_at_the_terminal_takes_a_line_per_turn(tmp_path: Path) -> None:
    process = await start_chat(db=tmp_path / "demo.db")
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(f"{PROMPT}\n".encode())
        await process.stdin.drain()
        first = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert "14:20" in first.decode()
        process.stdin.write(b"and the one before?\n")
        await process.stdin.drain()
        second = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert "scripted demo" in second.decode()
        process.stdin.close()  # the end of stdin ends the conversation
        _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    assert "ended by the user: 2 turns" in err.decode()


@pytest.mark.parametrize(
    "argv",
    [
        ["chat", "--no-wait", "--address", "localhost:1"],
        ["send", "wf", "", "--address", "localhost:1"],
        ["send", "wf", "hi"],
        ["end"],
    ],
)
def test_bad_conversation_command_lines_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)

    assert starter.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("starter.py"), err


async def test_ctrl_c_interrupts_the_turn_and_a_second_one_ends_the_chat(tmp_path: Path) -> None:
    """Ctrl-C as a terminal sends it, to the whole process group: the chat's dev server is in
    a session of its own, so it goes on serving the conversation."""
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"text": "too slow to wait for", "delay_seconds": 30}]))
    process = await start_chat(
        "--script",
        str(script),
        "hello",
        db=tmp_path / "demo.db",
        start_new_session=True,
    )
    assert process.stderr is not None
    seen: list[str] = []

    async def until(text: str) -> None:
        while not any(text in line for line in seen):
            line = await asyncio.wait_for(process.stderr.readline(), timeout=60)
            assert line, f"stderr ended before {text!r}: {seen}"
            seen.append(line.decode())

    try:
        await until("turn 1: working")
        os.killpg(process.pid, signal.SIGINT)
        await until("turn 1 interrupted")
        os.killpg(process.pid, signal.SIGINT)
        await until("ended by the user: 1 turns")
        await asyncio.wait_for(process.wait(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, seen
