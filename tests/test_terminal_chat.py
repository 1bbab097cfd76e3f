"""`chat` at a terminal, as a person meets it (cli/terminal/): standard input, output and error a
pseudo-terminal, a message typed and its answer read, another line a turn of its own, Ctrl-C
typed at the keyboard to interrupt a turn, and /end to end the conversation."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from temporalio.testing import WorkflowEnvironment

from durable_agent.serving.worker import build_worker

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."
HIDDEN = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")


class Terminal:
    """The controlling end of a pseudo-terminal: what a person types, and what they are shown."""

    def __init__(self, controller: int) -> None:
        self.controller = controller
        self.shown = ""
        self._read_to = 0

    def type(self, keys: str) -> None:
        os.write(self.controller, keys.encode())

    def shows(self, text: str, seconds: float = 60) -> str:
        """Wait until `text` is shown after what the last call read; all shown since then."""
        deadline = time.monotonic() + seconds
        while text not in self.shown[self._read_to :]:
            assert time.monotonic() < deadline, f"{text!r} not shown: {self.shown}"
            ready, _, _ = select.select([self.controller], [], [], 1)
            if ready:
                try:
                    chunk = os.read(self.controller, 65536)
                except OSError:  # EIO: the terminal's last writer has gone
                    chunk = b""
                assert chunk, f"the terminal closed before {text!r}: {self.shown}"
                self.shown += chunk.decode(errors="replace").replace("\r\n", "\n")
        since = self.shown[self._read_to :]
        self._read_to = self.shown.index(text, self._read_to) + len(text)
        return since


CONTROLLING = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)
"""Run in a session of its own: the terminal on stdin becomes the session's controlling one, so
that Ctrl-C typed there is SIGINT to the command, as in a shell; then the command."""


@contextmanager
def chat_at_a_terminal(*args: str, db: Path) -> Iterator[tuple[Terminal, subprocess.Popen[bytes]]]:
    environ = {k: v for k, v in os.environ.items() if k not in HIDDEN}
    environ.update(AGENT_DEMO_DB=str(db), TERM="dumb")
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", CONTROLLING, sys.executable, "starter.py", "chat", *args],
        cwd=REPO,
        env=environ,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    try:
        yield Terminal(controller), process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        os.close(controller)


def test_a_message_typed_at_the_terminal_is_answered_and_end_ends_the_chat(
    tmp_path: Path,
) -> None:
    with chat_at_a_terminal(db=tmp_path / "demo.db") as (terminal, process):
        terminal.shows("type a message, Enter sends it")
        terminal.type(PROMPT + "\n")
        answered = terminal.shows("turn 1 answered")
        assert "14:20" in answered and "step 1: model" in answered, answered
        terminal.shows(">")
        terminal.type("and the one before?\n")
        assert "scripted demo" in terminal.shows("turn 2 answered")
        terminal.shows(">")
        terminal.type("/end\n")
        terminal.shows("ended by the user: 2 turns")
        assert f"turn 1 answered: 3 steps: {PROMPT}" in terminal.shows("turn 2 answered")
        assert process.wait(timeout=30) == 0, terminal.shown


def test_ctrl_c_typed_at_the_terminal_interrupts_the_turn(tmp_path: Path) -> None:
    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"text": "too slow to wait for", "delay_seconds": 30}]))
    with chat_at_a_terminal("--script", str(script), "hello", db=tmp_path / "demo.db") as (
        terminal,
        process,
    ):
        terminal.shows("turn 1: working")
        terminal.type("\x03")  # Ctrl-C, as the terminal's line discipline takes it
        terminal.shows("turn 1 interrupted")
        terminal.shows(">")
        terminal.type("\x04")  # Ctrl-D: the end of input ends the conversation
        terminal.shows("ended by the user: 1 turns")
        assert process.wait(timeout=30) == 0, terminal.shown


async def test_a_line_typed_while_a_call_waits_elsewhere_is_not_lost_without_a_word(
    temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """With --address the questions are not put at this terminal (the run's decisions are taken
    with the commands its hints name): a line typed while a call waits once went into a queue
    that nothing read, and was lost silently."""
    script = tmp_path / "refund.json"
    refund = {"name": "issue_refund", "arguments": {"order_id": 1042, "amount": 5}}
    script.write_text(json.dumps([{"calls": [refund]}, {"text": "never reached"}]))
    address = temporal_env.client.service_client.config.target_host
    on = ("--address", address, "--task-queue", task_queue, "--script", str(script))
    async with build_worker(temporal_env.client, task_queue):
        with chat_at_a_terminal(*on, "Refund 5 on order 1042.", db=tmp_path / "demo.db") as (
            terminal,
            process,
        ):
            await asyncio.to_thread(terminal.shows, "approve-call")
            terminal.type("yes, refund it\n")
            said = await asyncio.to_thread(terminal.shows, "then type")
            assert "not sent: the turn waits for a decision" in said, said
            terminal.type("/end\n")
            await asyncio.to_thread(terminal.shows, "ended by the user")
            assert await asyncio.to_thread(process.wait, 30) == 0, terminal.shown
