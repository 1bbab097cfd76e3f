"""The starter's plan mode and its subcommands (approve, reject, status, list, result): in-process
against the session's dev server, and the self-contained terminal flow in a child process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import starter
from durable_agent.cli.args import RunArgs, parse_run
from durable_agent.cli.run import run
from durable_agent.client.agent_client import AgentClient
from durable_agent.demo.script import DEMO_PLAN, demo_plan_script, support_demo_script
from durable_agent.serving import command_line
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.model_settings import ScriptedCall
from tests import helpers
from tests.helpers import TEST_WORKER_OPTIONS, eventually
from tests.test_agent_client import end_leftovers

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Where is my latest order? My email is a@b.com."
REJECT_THEN_APPROVE = [
    {"calls": [{"name": "submit_plan", "arguments": {"steps": ["Cancel order 104999"]}}]},
    {
        "calls": [{"name": "submit_plan", "arguments": {"steps": ["Refund 10 on 1042"]}}],
        "expect": "refund instead",
    },
    {"text": "Refund done.", "expect": "approved plan v2"},
]


def step_lines(stderr: str) -> list[str]:
    return [line.split(":")[0] for line in stderr.splitlines() if line.startswith("step ")]


class Cli(helpers.Cli):
    """starter.py in this process, against the session's server, one command at a time."""

    def __init__(
        self, env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        super().__init__(env, task_queue, capsys)
        self.started: list[str] = []

    async def start(self, *options: str) -> str:
        code, out, err = await self(
            PROMPT, "--plan", "--no-wait", "--json", "--task-queue", self.task_queue, *options
        )
        assert code == 0, err
        started = json.loads(out)
        assert started["status"] == "running" and started["steps"] == 0
        self.started.append(started["workflow_id"])
        return str(started["workflow_id"])

    async def status(self, workflow_id: str) -> dict[str, Any]:
        code, out, err = await self("status", workflow_id)
        assert code == 0, err
        return dict(json.loads(out))

    async def waiting(self, workflow_id: str, version: int = 1) -> dict[str, Any]:
        async def waits() -> bool:
            status = await self.status(workflow_id)
            plan = status["plan"]
            return status["status"] == "awaiting_approval" and plan["version"] == version

        await eventually(waits)
        return await self.status(workflow_id)


@asynccontextmanager
async def serving(
    env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> AsyncIterator[Cli]:
    """A worker for the test's runs; whatever a failed test leaves running ends before it."""
    cli = Cli(env, task_queue, capsys)
    async with build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS):
        try:
            yield cli
        finally:
            await end_leftovers(AgentClient(env.client, task_queue), cli.started)


async def test_a_plan_run_is_listed_shown_refused_approved_and_followed(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serving(temporal_env, task_queue, capsys) as cli:
        workflow_id = await cli.start()

        status = await cli.waiting(workflow_id)
        assert status["workflow_id"] == workflow_id
        assert status["plan"] == {
            "version": 1,
            "steps": DEMO_PLAN,
            "status": "awaiting_approval",
            "comment": None,
        }
        assert status["step"] == 1 and "approve_plan" in status["details"]

        listing = ""

        async def listed() -> bool:
            nonlocal listing
            code, listing, err = await cli("list", "--awaiting-approval")
            assert code == 0, err
            return workflow_id in listing

        await eventually(listed)
        line = next(line for line in listing.splitlines() if line.startswith(workflow_id))
        assert line == f"{workflow_id}  plan v1: " + " | ".join(DEMO_PLAN)
        code, out, _ = await cli("list", "--awaiting-approval", "--json")
        assert code == 0
        rows = {row["workflow_id"]: row for row in json.loads(out)}
        assert rows[workflow_id]["plan"]["steps"] == DEMO_PLAN
        assert rows[workflow_id]["plan"]["version"] == 1

        code, out, err = await cli("approve", workflow_id, "--version", "2")
        assert code == 1 and out == ""
        assert err.splitlines() == [
            f"cannot approve the plan of {workflow_id}: "
            "plan version 2 is not the one waiting: version 1 is"
        ]

        code, out, err = await cli("approve", workflow_id, "--version", "1", "--comment", "go")
        assert code == 0, err
        assert out == f"{workflow_id}: plan v1 approved\n"

        code, out, err = await cli("result", workflow_id, "--json")
        assert code == 0, err
        result = json.loads(out)
        assert result["workflow_id"] == workflow_id and result["status"] == "completed"
        assert result["steps"] == 4 and "14:20" in result["answer"]
        assert step_lines(err) == ["step 1", "step 2", "step 3", "step 4"]

        status = await cli.status(workflow_id)
        assert status["status"] == "completed"
        assert status["plan"]["status"] == "approved" and status["plan"]["comment"] == "go"
        # Nothing waits any more: a decision now is refused, in one line.
        code, out, err = await cli("approve", workflow_id)
        assert code == 1 and out == "" and len(err.splitlines()) == 1, err
        assert err.startswith(f"approve {workflow_id}: ") and "completed" in err, err


async def test_rejection_feedback_makes_the_model_plan_again(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(REJECT_THEN_APPROVE))
    async with serving(temporal_env, task_queue, capsys) as cli:
        workflow_id = await cli.start("--script", str(script))
        await cli.waiting(workflow_id, version=1)

        code, out, err = await cli("reject", workflow_id, "--feedback", "refund instead")
        assert code == 0, err
        assert out == f"{workflow_id}: plan v1 rejected\n"

        second = await cli.waiting(workflow_id, version=2)
        assert second["plan"]["steps"] == ["Refund 10 on 1042"]
        code, out, err = await cli("reject", workflow_id, "--feedback", "x", "--version", "1")
        assert code == 1 and "plan version 1 is not the one waiting: version 2 is" in err
        code, out, err = await cli("approve", workflow_id, "--json")
        assert code == 0, err
        assert json.loads(out) == {
            "workflow_id": workflow_id,
            "plan": {
                "version": 2,
                "steps": ["Refund 10 on 1042"],
                "status": "approved",
                "comment": None,
            },
        }

        code, out, err = await cli("result", workflow_id)
        assert code == 0, err
        assert out == "Refund done.\n"
        assert step_lines(err) == ["step 1", "step 2", "step 3"] and "3 steps" in err


async def test_a_run_followed_through_an_address_shows_its_plan_and_how_to_decide(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serving(temporal_env, task_queue, capsys) as cli:
        args = parse_run([PROMPT, "--plan", "--address", cli.address, "--task-queue", task_queue])
        capsys.readouterr()
        following = asyncio.create_task(run(args))
        said = ""

        async def hint_shown() -> bool:
            nonlocal said
            said += capsys.readouterr().err
            return "decide with:" in said

        await eventually(hint_shown)
        workflow_id = next(
            line.split()[1] for line in said.splitlines() if line.startswith("workflow ")
        )
        cli.started.append(workflow_id)
        assert f"plan v1 of {workflow_id} waits for approval:" in said
        assert f"  3. {DEMO_PLAN[2]}" in said
        where = f"--address {cli.address}"
        assert (
            f"decide with: starter.py approve {workflow_id} {where} [--comment TEXT], or "
            f"starter.py reject {workflow_id} {where} --feedback TEXT"
        ) in said.splitlines()
        assert not following.done()  # it waits for a decision from elsewhere

        await AgentClient(temporal_env.client, task_queue).run(workflow_id).approve_plan()
        code = await asyncio.wait_for(following, 15)
        out, err = capsys.readouterr()

    assert code == 0, err
    assert "14:20" in out and out.count("\n") == 1
    assert "4 steps" in err


async def test_unknown_runs_fail_in_one_line(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(temporal_env, task_queue, capsys)
    for command in (["status"], ["approve"], ["reject", "--feedback", "x"], ["result"]):
        code, out, err = await cli(command[0], "agent-nope", *command[1:])
        assert code == 1, (command, err)
        assert out == "" and len(err.splitlines()) == 1, (command, err)
        assert "agent-nope" in err, (command, err)
    code, out, err = await cli("result", "agent-nope", "--json")
    assert code == 1 and json.loads(out)["status"] == "failed"


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "agent-x"],
        ["approve", "agent-x", "--comment", "ok"],
        ["reject", "agent-x", "--feedback", "no"],
        ["list", "--awaiting-approval"],
        ["result", "agent-x", "--json"],
    ],
    ids=["status", "approve", "reject", "list", "result"],
)
def test_a_subcommand_without_an_address_exits_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)

    assert starter.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"starter.py {argv[0]}: error: {argv[0]} needs --address (or TEMPORAL_ADDRESS): the runs "
        "live on a Temporal server (see --help)"
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["approve"],
        ["approve", "agent-x", "--version", "0"],
        ["reject", "agent-x"],
        ["reject", "agent-x", "--feedback", "  "],
        ["list"],
        ["status", "agent-x", "agent-y"],
        ["result", "agent-x", "--nope"],
    ],
    ids=["no-id", "version-0", "no-feedback", "blank-feedback", "list-what", "two-ids", "bad-flag"],
)
def test_a_bad_subcommand_line_exits_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")

    assert starter.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("starter.py"), err


def test_a_prompt_named_like_a_subcommand_goes_after_a_double_dash() -> None:
    args = starter.parse_command_line(["--", "status"])
    assert isinstance(args, RunArgs)
    assert args.command == "run" and args.prompt == "status" and not args.plan
    args = starter.parse_command_line(["--plan", "--", "list"])
    assert isinstance(args, RunArgs)
    assert args.command == "run" and args.prompt == "list" and args.plan
    args = starter.parse_command_line(["--", "worker"])  # `worker` alone serves runs
    assert isinstance(args, RunArgs) and args.prompt == "worker"


def test_the_plan_demo_submits_its_plan_first_and_then_plays_the_demo() -> None:
    first, second, *rest = demo_plan_script()
    demo = support_demo_script()

    assert first.calls == [ScriptedCall(name="submit_plan", arguments={"steps": DEMO_PLAN})]
    assert second.expect == "approved"
    assert second.model_copy(update={"expect": None}) == demo[0]
    assert rest == demo[1:]


def run_in_terminal(
    *args: str, stdin: str, db: Path, script: Any = None, tmp_path: Path, plan: bool = True
) -> tuple[int, dict[str, Any], str]:
    """A self-contained run (a plan run by default) in a child process, answered through
    stdin."""
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["AGENT_DEMO_DB"] = str(db)
    extra: list[str] = []
    if script is not None:
        path = tmp_path / "script.json"
        path.write_text(json.dumps(script))
        extra = ["--script", str(path)]
    done = subprocess.run(
        [sys.executable, "starter.py", PROMPT, *(["--plan"] * plan), "--json", *extra, *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def test_at_the_terminal_feedback_rejects_and_an_empty_line_approves(tmp_path: Path) -> None:
    code, out, err = run_in_terminal(
        stdin="refund instead, looks bad\n\n",
        db=tmp_path / "demo.db",
        script=REJECT_THEN_APPROVE,
        tmp_path=tmp_path,
    )

    assert code == 0, err
    assert out["status"] == "completed" and out["answer"] == "Refund done."
    assert "plan v1 of " in err and "  1. Cancel order 104999" in err
    assert "plan v1 rejected; the model plans again" in err
    assert "plan v2 of " in err and "  1. Refund 10 on 1042" in err
    assert "plan v2 approved" in err
    assert step_lines(err) == ["step 1", "step 2", "step 3"]


def test_at_the_terminal_y_approves_the_demo_plan(tmp_path: Path) -> None:
    code, out, err = run_in_terminal(stdin="y\n", db=tmp_path / "demo.db", tmp_path=tmp_path)

    assert code == 0, err
    assert out["steps"] == 4 and "14:20" in out["answer"]
    assert all(f"  {n}. {step}" in err for n, step in enumerate(DEMO_PLAN, start=1))
    assert step_lines(err) == ["step 1", "step 2", "step 3", "step 4"]


def test_at_the_terminal_the_end_of_stdin_exits_1_in_one_line(tmp_path: Path) -> None:
    code, out, err = run_in_terminal(stdin="", db=tmp_path / "demo.db", tmp_path=tmp_path)

    assert code == 1, err
    said = [line for line in err.splitlines() if "stdin ended" in line]
    assert len(said) == 1 and err.splitlines()[-1] == said[0], err
    assert said[0].startswith(f"stdin ended before a decision on plan v1 of {out['workflow_id']}")
    assert out["status"] == "failed" and out["error"]["type"] == "NoDecision"
    assert out["steps"] == 1


@pytest.mark.parametrize("argv", [[PROMPT], ["status", "some-run"]], ids=["run", "subcommand"])
def test_a_malformed_key_configuration_exits_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("AGENT_PAYLOAD_KEYS", "k1=not base64!")

    assert starter.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "starter.py: error: AGENT_PAYLOAD_KEYS: the key of id 'k1' is not base64"
    ], err


def test_at_the_terminal_a_plan_cannot_forge_a_step_or_drive_the_terminal(
    tmp_path: Path,
) -> None:
    """The model writes the plan a person approves: a newline in a step would show a step that
    is not in the plan, and an escape sequence could erase or rewrite what is on the screen.
    Each shows as its escape, on one line."""
    forged = "Cancel order 104999\n  2. Nothing else"
    erasing = "Refund 10 on 1042\x1b[2K\r  (nothing to refund)\u202e"
    script = [
        {"calls": [{"name": "submit_plan", "arguments": {"steps": [forged, erasing]}}]},
        {"text": "Done.\x1b]0;owned\x07", "expect": "approved plan v1"},
    ]
    code, out, err = run_in_terminal(
        stdin="\n", db=tmp_path / "demo.db", script=script, tmp_path=tmp_path
    )

    assert code == 0, err
    assert "  1. Cancel order 104999\\n  2. Nothing else\n" in err
    assert "  2. Refund 10 on 1042\\x1b[2K\\r  (nothing to refund)\\u202e\n" in err
    assert not {"\x1b", "\r", "\u202e", "\x07"} & set(err), err
    assert out["answer"] == "Done.\x1b]0;owned\x07"  # --json carries the model's text as it is


def test_an_answer_is_shown_safe_at_a_terminal_and_kept_whole_for_a_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = "Line one\n\tLine two\x1b[31m red\x1b[0m\r"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert command_line.for_stdout(answer) == answer
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    shown = "Line one\n\tLine two\\x1b[31m red\\x1b[0m\\r"
    assert command_line.for_stdout(answer) == shown
