"""The starter and tool calls that wait for a person: `calls`, `approve-call`, `deny-call`,
`list`, `watch` against the session's server, and the self-contained terminal flow."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from temporalio.testing import WorkflowEnvironment

from durable_agent.cli import decide
from durable_agent.cli.args import Following
from durable_agent.client.agent_client import AgentRun
from durable_agent.workflows.events import AgentEvent
from tests.helpers import eventually
from tests.test_starter_plan import PROMPT, run_in_terminal as run_plan_in_terminal, serving

CANCEL_THEN_EMAIL = [
    {"calls": [{"name": "cancel_order", "arguments": {"order_id": 104999, "reason": "asked"}}]},
    {
        "calls": [
            {"name": "send_email", "arguments": {"to": "a@b.com", "subject": "s", "body": "b"}}
        ],
        "expect": '"cancelled": true',
    },
    {"text": "Cancelled; no email sent.", "expect": "not now"},
]


async def test_a_waiting_call_is_listed_decided_and_watched(
    temporal_env: WorkflowEnvironment,
    task_queue: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(CANCEL_THEN_EMAIL))
    async with serving(temporal_env, task_queue, capsys) as cli:
        code, out, err = await cli(
            PROMPT, "--script", str(script), "--no-wait", "--json", "--task-queue", task_queue
        )
        assert code == 0, err
        workflow_id = json.loads(out)["workflow_id"]
        cli.started.append(workflow_id)

        calls: list[dict[str, Any]] = []

        async def waits() -> bool:
            nonlocal calls
            code, out, err = await cli("calls", workflow_id, "--json")
            assert code == 0, err
            calls = json.loads(out)
            return bool(calls)

        await eventually(waits)
        assert [(c["call_id"], c["tool"], c["status"]) for c in calls] == [
            ("call_1_1", "cancel_order", "awaiting_approval")
        ]
        code, out, err = await cli("list", "--awaiting-approval")
        assert code == 0, err
        assert f"{workflow_id}  tool call call_1_1: cancel_order " in out

        code, out, err = await cli("approve-call", workflow_id, "call_9_9")
        assert code == 1 and out == ""
        assert err.strip() == (
            f"cannot approve call_9_9 of {workflow_id}: no tool call 'call_9_9' asked for "
            "approval in this run (waiting: call_1_1)"
        )
        code, out, err = await cli("approve-call", workflow_id, "call_1_1")
        assert code == 0, err
        assert out.strip() == f"{workflow_id}: call_1_1 (cancel_order) approved"

        async def email_waits() -> bool:
            _, out, _ = await cli("calls", workflow_id)
            return "call_2_1" in out

        await eventually(email_waits)
        code, out, err = await cli(
            "deny-call", workflow_id, "call_2_1", "--reason", "not now", "--json"
        )
        assert code == 0, err
        assert json.loads(out)["call"]["status"] == "denied"

        code, out, err = await cli("result", workflow_id, "--json")
        assert code == 0, err
        assert json.loads(out)["answer"] == "Cancelled; no email sent."

        code, out, err = await cli("watch", workflow_id)
        assert code == 0, err
        lines = out.splitlines()
        assert [int(line.split()[0]) for line in lines] == list(range(len(lines)))
        assert any("approval requested: cancel_order call_1_1" in line for line in lines)
        assert any(
            "approval decided: send_email call_2_1 denied (not now)" in line for line in lines
        )
        assert "completed: Cancelled; no email sent." in lines[-1]

        code, out, err = await cli("watch", workflow_id, "--from", "3", "--json")
        assert code == 0, err
        events = [json.loads(line) for line in out.splitlines()]
        assert [e["offset"] for e in events] == list(range(3, len(lines)))
        assert events[-1]["kind"] == "completed"


async def test_a_denial_needs_a_reason_and_a_bad_offset_is_refused(
    temporal_env: WorkflowEnvironment, task_queue: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serving(temporal_env, task_queue, capsys) as cli:
        code, out, err = await cli("deny-call", "some-run", "call_1_1", "--reason", " ")
        assert code == 2 and out == ""
        assert err.strip() == (
            "starter.py deny-call: error: --reason is empty: the model needs to know why "
            "(see --help)"
        )
        code, out, err = await cli("watch", "some-run", "--from", "-1")
        assert code == 2 and len(err.strip().splitlines()) == 1


def run_in_terminal(
    *args: str, stdin: str, tmp_path: Path, script: list[Any] = CANCEL_THEN_EMAIL
) -> tuple[int, dict[str, Any], str]:
    """A self-contained run in a child process, its tool calls decided through stdin."""
    return run_plan_in_terminal(
        *args, stdin=stdin, db=tmp_path / "demo.db", script=script, tmp_path=tmp_path, plan=False
    )


def test_at_the_terminal_enter_approves_and_text_denies_with_a_reason(tmp_path: Path) -> None:
    code, out, err = run_in_terminal(stdin="\nnot now\n", tmp_path=tmp_path)

    assert code == 0, err
    assert out["answer"] == "Cancelled; no email sent."
    assert "waits for approval: cancel_order" in err and "tool call call_1_1 approved" in err
    assert "waits for approval: send_email" in err
    assert "tool call call_2_1 denied; the model is told why" in err
    steps = [line.split(":")[0] for line in err.splitlines() if line.startswith("step ")]
    assert steps == ["step 1", "step 2", "step 3"]
    assert "send_email 0 ms (denied)" in err


def test_at_the_terminal_the_end_of_stdin_leaves_the_call_undecided(tmp_path: Path) -> None:
    code, out, err = run_in_terminal(stdin="", tmp_path=tmp_path)

    assert code == 1, err
    said = [line for line in err.splitlines() if "stdin ended" in line]
    assert said == [
        f"stdin ended before a decision on tool call call_1_1 (cancel_order) of "
        f"{out['workflow_id']}; nothing here can decide it (run at a terminal, or use --address "
        "and the approve subcommands)"
    ]
    assert out["error"]["type"] == "NoDecision"


def test_approve_all_runs_every_call_without_asking(tmp_path: Path) -> None:
    script = [*CANCEL_THEN_EMAIL[:2], {"text": "Cancelled and emailed."}]
    code, out, err = run_in_terminal("--approve-all", stdin="", tmp_path=tmp_path, script=script)

    assert code == 0, err
    assert out["answer"] == "Cancelled and emailed."
    assert "waits for approval" not in err
    assert "send_email" in err and "(ok)" in err


async def test_a_call_a_remembered_denial_decides_is_not_shown_as_waiting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Its approval_requested says so (`remembered`), and an approval_decided follows at once:
    the CLI showed it as waiting for approval, with commands that the run would refuse."""
    following = Following(json=False, address="h:7233")
    fields = {"step": 2, "at": datetime.now(UTC), "call_id": "call_2_1", "tool": "cancel_order"}
    asked = AgentEvent(kind="approval_requested", arguments="{}", **fields)
    run = cast(AgentRun, SimpleNamespace(id="agent-1"))
    remembered = asked.model_copy(update={"outcome": "remembered"})
    assert await decide.shown(run, remembered, following, ask=False) is None
    assert capsys.readouterr().err == ""
    assert await decide.shown(run, asked, following, ask=False) is not None
    assert "call_2_1 of agent-1 waits for approval" in capsys.readouterr().err
