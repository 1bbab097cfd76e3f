"""The starter CLI: self-contained runs in a subprocess, bad command lines, and runs against the
session's dev server through --address."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import starter
from durable_agent.cli.args import RunArgs, parse_run
from durable_agent.cli.run import run
from durable_agent.serving.dev_server import free_port
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."


def run_cli(*args: str, db: Path) -> tuple[int, dict[str, Any], str]:
    """A self-contained run in a child process: returns (exit code, the JSON, stderr)."""
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["AGENT_DEMO_DB"] = str(db)
    done = subprocess.run(
        [sys.executable, "starter.py", PROMPT, *args, "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def step_lines(stderr: str) -> list[str]:
    return [line.split(":")[0] for line in stderr.splitlines() if line.startswith("step ")]


def test_self_contained_run_completes(tmp_path: Path) -> None:
    code, out, stderr = run_cli(db=tmp_path / "demo.db")

    assert code == 0, stderr
    assert out["status"] == "completed" and out["error"] is None
    assert out["steps"] == 3
    assert "1042" in out["answer"] and "14:20" in out["answer"]
    assert out["usage"]["input_tokens"] > 0
    assert out["workflow_id"].startswith("agent-")
    assert step_lines(stderr) == ["step 1", "step 2", "step 3"]
    assert "Web UI: http://127.0.0.1:" in stderr


def test_self_contained_run_over_the_step_limit_fails(tmp_path: Path) -> None:
    code, out, stderr = run_cli("--max-steps", "2", db=tmp_path / "demo.db")

    assert code == 1, stderr
    assert out["status"] == "failed" and out["answer"] is None
    assert out["error"]["type"] == "AgentStepLimitExceeded"
    assert out["steps"] == 2
    assert out["usage"]["input_tokens"] > 0
    # The steps come from the failure's details; the reason is on stderr.
    assert step_lines(stderr) == ["step 1", "step 2"]
    assert "failed: AgentStepLimitExceeded: max_steps=2" in stderr


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["hi", "--max-steps", "0"],
        ["hi", "--max-steps", "abc"],
        ["hi", "--provider", "nope"],
        ["hi", "--no-wait"],
        ["   "],
        # Numbers past what the run takes (workflows/bounds.py): once a traceback, exit 1.
        ["hi", "--max-steps", "2000000", "--print-input"],
        ["hi", "--max-cost-usd", "1e300", "--print-input"],
        ["hi", "--provider", "anthropic", "--thinking-budget", "9" * 14, "--print-input"],
    ],
    ids=[
        "no-prompt",
        "zero-steps",
        "steps-not-int",
        "bad-provider",
        "no-wait-alone",
        "empty",
        "steps-past-the-bound",
        "cost-past-the-bound",
        "thinking-past-the-bound",
    ],
)
def test_bad_command_line_exits_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)

    assert starter.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("starter.py: error:"), err


def server_args(env: WorkflowEnvironment, task_queue: str, *extra: str) -> RunArgs:
    """Arguments for a run against the session's dev server, served by the test's worker."""
    address = env.client.service_client.config.target_host
    return parse_run([PROMPT, "--address", address, "--task-queue", task_queue, *extra])


async def test_run_against_a_server_reports_json(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = server_args(temporal_env, task_queue, "--json")
    async with build_worker(temporal_env.client, task_queue):
        code = await run(args)

    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "completed" and result["steps"] == 3
    assert "14:20" in result["answer"]
    assert step_lines(err) == ["step 1", "step 2", "step 3"]
    assert "Web UI" not in err  # no embedded server when given an address


async def test_run_against_a_server_prints_only_the_answer_on_stdout(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = server_args(temporal_env, task_queue)
    async with build_worker(temporal_env.client, task_queue):
        code = await run(args)

    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count("\n") == 1 and "14:20" in out
    assert "3 steps" in err


async def test_no_wait_returns_a_running_workflow_id(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = server_args(temporal_env, task_queue, "--no-wait", "--json")
    # No worker yet: --no-wait must not wait for the run.
    assert await asyncio.wait_for(run(args), timeout=10) == 0
    started = json.loads(capsys.readouterr().out)
    assert started["status"] == "running" and started["steps"] == 0

    handle = temporal_env.client.get_workflow_handle_for(AgentWorkflow.run, started["workflow_id"])
    async with build_worker(temporal_env.client, task_queue):
        result = await handle.result()
    assert result.steps == 3 and "14:20" in result.answer


async def test_closed_port_cannot_connect(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_run(["hi", "--address", f"127.0.0.1:{free_port()}"])

    assert await run(args) == 1
    out, err = capsys.readouterr()
    assert out == ""
    failures = [line for line in err.splitlines() if "cannot connect" in line]
    assert len(failures) == 1 and err.splitlines()[-1] == failures[0], err
    assert failures[0].startswith(f"cannot connect to Temporal at {args.address}: ")


async def test_closed_port_still_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse_run(["hi", "--address", f"127.0.0.1:{free_port()}", "--json"])

    assert await run(args) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "failed" and printed["workflow_id"] is None
    assert printed["error"]["type"] == "ConnectionError"


async def test_json_lists_the_compensations_of_a_failed_run(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {
                    "calls": [
                        {
                            "name": "cancel_order",
                            "arguments": {"order_id": 104999, "reason": "asked"},
                        }
                    ]
                },
                {"calls": [{"name": "write_thing", "arguments": {"label": "x"}}]},
                {
                    "calls": [
                        {
                            "name": "send_email",
                            "arguments": {"to": "a@b.com", "subject": "s", "body": "b"},
                        }
                    ]
                },
                {"text": "never reached"},
            ]
        )
    )
    args = server_args(
        temporal_env,
        task_queue,
        "--json",
        "--script",
        str(script),
        "--max-steps",
        "3",
        "--approve-all",
    )
    async with build_worker(temporal_env.client, task_queue):
        code = await run(args)

    out, err = capsys.readouterr()
    assert code == 1, err
    result = json.loads(out)
    assert result["error"]["type"] == "AgentStepLimitExceeded"
    assert result["compensations"] == [
        {"tool": "send_email", "tool_call_id": "call_3_1", "status": "completed"},
        {"tool": "cancel_order", "tool_call_id": "call_1_1", "status": "completed"},
    ]
    assert result["not_undone"] == [{"tool": "write_thing", "tool_call_id": "call_2_1"}]


def test_a_script_that_is_not_valid_is_a_command_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"calls": "not a list"}]')

    assert starter.main([PROMPT, "--script", str(script)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"--script {script}" in err


def test_the_console_script_serves_runs_with_worker(tmp_path: Path) -> None:
    """`durable-agent worker` is worker.py's command line, so an installed project has one
    command; run from elsewhere, it is the installed script, not this checkout's file."""
    script = Path(sysconfig.get_path("scripts")) / "durable-agent"
    done = subprocess.run(
        [str(script), "worker", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: durable-agent worker") and "--task-queue" in done.stdout


def test_a_bad_worker_command_line_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert starter.main(["worker", "--nope"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == ["starter.py worker: error: No such option '--nope' (see --help)"], (
        err
    )


def test_a_bad_sandbox_setting_exits_2_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert starter.main(["worker", "--sandbox", "strict"]) == 2
    assert "Invalid value for '--sandbox' (env var: 'AGENT_SANDBOX'): 'strict' is not one of" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("AGENT_SANDBOX", "strict")
    assert starter.main(["worker"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(
        "starter.py worker: error: Invalid value for '--sandbox' (env var: 'AGENT_SANDBOX'): "
        "'strict' is not one of 'fast', 'stock' (see --help)"
    ), err
