"""--thinking-budget, --reasoning-effort and --provider openai-responses where users meet them:
the starter in a subprocess against the fakes, and bad combinations refused in one line."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from durable_agent.cli import starter
from tests import fake_anthropic, fake_openai

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."


def run_cli(*args: str, env: dict[str, str], db: Path) -> tuple[int, dict[str, Any], str]:
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    environ = {k: v for k, v in os.environ.items() if k not in hidden}
    environ.update(env, AGENT_DEMO_DB=str(db))
    done = subprocess.run(
        [sys.executable, "starter.py", PROMPT, *args, "--json"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=90,
    )
    return done.returncode, json.loads(done.stdout or "null"), done.stderr


def test_a_thinking_run_from_the_command_line(tmp_path: Path) -> None:
    search = ("toolu_1", "search_orders", {"email": "a@b.com"})
    with fake_anthropic.FakeAnthropic(
        [
            fake_anthropic.Reply(thinking="Search by email.", tool_uses=[search]),
            fake_anthropic.Reply("Your latest order is #1042.", thinking="Answer with it."),
        ]
    ) as fake:
        env = {"ANTHROPIC_API_KEY": fake.api_key, "ANTHROPIC_BASE_URL": fake.base_url}
        code, out, stderr = run_cli(
            "--provider", "anthropic", "--thinking-budget", "2048", env=env, db=tmp_path / "d.db"
        )
    assert code == 0, stderr
    assert out["answer"] == "Your latest order is #1042."
    assert out["usage"]["reasoning_tokens"] > 0
    first, second = (request.body for request in fake.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert fake_anthropic.request_error(second) is None
    assert second["messages"][1]["content"][0]["type"] == "thinking"


def test_a_responses_run_from_the_command_line(tmp_path: Path) -> None:
    search = ("call_1", "search_orders", '{"email": "a@b.com"}')
    with fake_openai.FakeOpenAI(
        [
            fake_openai.ResponsesReply(reasoning="Search by email.", calls=[search]),
            fake_openai.ResponsesReply("Your latest order is #1042.", reasoning="Answer."),
        ]
    ) as fake:
        env = {"OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url}
        code, out, stderr = run_cli(
            "--provider",
            "openai-responses",
            "--reasoning-effort",
            "low",
            env=env,
            db=tmp_path / "d.db",
        )
    assert code == 0, stderr
    assert out["answer"] == "Your latest order is #1042."
    first, second = (request.body for request in fake.requests)
    assert first["model"] == "gpt-5-mini" and first["reasoning"] == {"effort": "low"}
    assert first["store"] is False
    assert fake_openai.responses_error(second) is None
    assert [item.get("type") for item in second["input"]][1:] == [
        "reasoning",
        "function_call",
        "function_call_output",
    ]


def test_stream_prints_the_models_text_as_it_is_written(tmp_path: Path) -> None:
    """--stream (on by default at a terminal): the answer is on stderr while it is written, at
    a model's pace (20 events 50 ms apart), and on stdout once the run is done."""
    answer = "Your latest order is #1042, delivered yesterday at 14:20 to the front desk."
    with fake_anthropic.FakeAnthropic(
        [fake_anthropic.Reply(answer, thinking="Answer from memory.", pace_seconds=0.05)]
    ) as fake:
        env = {"ANTHROPIC_API_KEY": fake.api_key, "ANTHROPIC_BASE_URL": fake.base_url}
        code, out, stderr = run_cli(
            "--provider", "anthropic", "--stream", env=env, db=tmp_path / "d.db"
        )
    assert code == 0, stderr
    assert out["answer"] == answer
    assert fake.requests[0].body["stream"] is True
    streamed = [line for line in stderr.splitlines() if answer.startswith(line) and line]
    assert streamed, stderr
    assert "[thinking: " in stderr


def at_a_terminal(*args: str, env: dict[str, str], db: Path) -> tuple[int, str]:
    """The starter as a person runs it: standard input, output and error a pseudo-terminal."""
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    environ = {k: v for k, v in os.environ.items() if k not in hidden}
    environ.update(env, AGENT_DEMO_DB=str(db), TERM="dumb")
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "starter.py", PROMPT, *args],
        cwd=REPO,
        env=environ,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if not ready:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's last writer has gone
                break
            if not chunk:
                break
            shown += chunk
        return process.wait(timeout=30), shown.decode(errors="replace")
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize("flags", [(), ("--no-stream",)], ids=["by-default", "no-stream"])
def test_at_a_terminal_the_text_streams_unless_told_not_to(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    """What the README and --help promise: at a terminal the model's text is printed as it is
    written, with no flag; `--no-stream` turns it off."""
    answer = "Your latest order is #1042, delivered yesterday."
    with fake_anthropic.FakeAnthropic(
        [fake_anthropic.Reply(answer, thinking="Answer from memory.", pace_seconds=0.05)]
    ) as fake:
        env = {"ANTHROPIC_API_KEY": fake.api_key, "ANTHROPIC_BASE_URL": fake.base_url}
        code, shown = at_a_terminal("--provider", "anthropic", *flags, env=env, db=tmp_path / "d")
    assert code == 0, shown
    assert answer in shown
    streamed = not flags
    assert fake.requests[0].body.get("stream") is (True if streamed else None)
    assert ("[thinking: " in shown) is streamed, shown


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--provider", "anthropic", "--thinking-budget", "500"], "at least 1024"),
        (["--provider", "openai", "--reasoning-effort", "low"], "--reasoning-effort is for"),
        (["--provider", "openai-responses", "--reasoning-effort", "max"], "not one that"),
        (["--provider", "openai-responses", "--thinking-budget", "2048"], "are Anthropic's"),
        (["--thinking-budget", "lots"], "--thinking-budget"),
    ],
    ids=["small-budget", "chat-effort", "bad-effort", "budget-on-openai", "not-a-number"],
)
def test_bad_reasoning_flags_exit_2_with_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    assert starter.main(["hi", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("starter.py: error:"), err
    assert says in err
