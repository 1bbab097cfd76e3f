"""`starter.py fork`, `diff` and `eval` in a subprocess against the session's dev server, with
the worker in this process (a fork needs one, as a run started with --address does)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from durable_agent.client.agent_client import AgentClient
from durable_agent.client.evaluation import recent_completed
from durable_agent.client.forking import read_run
from durable_agent.demo.script import support_demo_script
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import ToolApprovalPolicy
from tests import fake_openai
from tests.helpers import TEST_WORKER_OPTIONS, eventually, scripted_input

REPO = Path(__file__).resolve().parent.parent


async def starter(env: WorkflowEnvironment, *args: str) -> tuple[int, str, str]:
    """`python starter.py ARGS --address ...` in a child process: (exit code, stdout, stderr)."""
    address = env.client.service_client.config.target_host
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        "--address",
        address,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k not in hidden},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(child.communicate(), timeout=120)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_openai.FakeOpenAI]:
    """A provider that answers every request at once, from the tool results it was sent."""

    def answer(body: dict[str, Any]) -> fake_openai.Reply:
        said = json.dumps(body["messages"])
        return fake_openai.Reply("Your order #1042 is on its way." if "1042" in said else "?")

    with fake_openai.FakeOpenAI(responder=answer) as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


async def test_fork_then_diff_shows_where_the_fork_diverges(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    script = support_demo_script()
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(script))
        await original.result()
        # Another last reply from step 3 on: the scripted fork plays its script after step 2.
        replies = REPO / "tests" / f"fork-{uuid.uuid4().hex}.json"
        replies.write_text(json.dumps([{"text": "Order #1042 arrived yesterday."}]))
        try:
            code, out, err = await starter(
                temporal_env,
                "fork",
                original.id,
                "--step",
                "2",
                "--provider",
                "scripted",
                "--script",
                str(replies),
                "--json",
            )
        finally:
            replies.unlink()
        assert code == 0, err
        forked = json.loads(out)
        assert forked["status"] == "completed" and forked["steps"] == 3
        assert forked["answer"] == "Order #1042 arrived yesterday."

        code, out, err = await starter(temporal_env, "diff", original.id, forked["workflow_id"])
        assert code == 0, err
        assert "step 1: same" in out and "step 2: same" in out
        assert "step 3: differs" in out and "they diverge at step 3" in out
        assert f"a fork of {original.id} at step 2" in out
        assert "steps   A 3" in out and "B 3 (2 inherited)" in out

        code, out, err = await starter(
            temporal_env, "diff", original.id, forked["workflow_id"], "--json"
        )
    assert code == 0, err
    compared = json.loads(out)
    assert compared["diverged_at"] == 3
    assert [step["same"] for step in compared["steps"]] == [True, True, False]
    first = compared["steps"][0]["a"]["calls"][0]
    assert first["name"] == "search_orders" and '"id": 1042' in first["result"]
    assert compared["b"]["inherited_steps"] == 2 and compared["a"]["inherited_steps"] == 0
    assert compared["b"]["answer"] == "Order #1042 arrived yesterday."
    # The fork can be found by the run it was forked from.
    await eventually(
        lambda: _forks(agents, original.id, forked["workflow_id"]), what="the fork to be listed"
    )


async def _forks(agents: AgentClient, original: str, fork: str) -> bool:
    return await agents.forks_of(original) == [fork]


async def test_a_fork_past_the_last_step_is_refused_with_the_step_count(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(support_demo_script()))
        await original.result()
    code, out, err = await starter(temporal_env, "fork", original.id, "--step", "4")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"fork {original.id}: run {original.id} had 3 steps: the step to fork at must be "
        "between 0 and 3, not 4"
    ]


async def test_bad_fork_and_eval_command_lines_are_one_line_and_exit_2(
    temporal_env: WorkflowEnvironment,
) -> None:
    for args, says in [
        (("fork", "agent-x"), "Missing option '--step'"),
        (("fork", "agent-x", "--step", "-1"), "Invalid value for '--step': -1 is not in the range"),
        (("fork", "agent-x", "--step", "1", "--script", "s.json"), "--script is for the"),
        (
            ("eval", "--label", "l", "--fork-step", "1", "--provider", "openai", "--score", "x"),
            "--score x: give it as module:function",
        ),
        (
            (
                "eval",
                "--label",
                "l",
                "--fork-step",
                "1",
                "--provider",
                "openai",
                "--score",
                "tests.fork_scores:nothing",
            ),
            "has no function nothing",
        ),
    ]:
        code, out, err = await starter(temporal_env, *args)
        assert code == 2 and out == "", (args, err)
        assert len(err.splitlines()) == 1 and says in err, (args, err)


async def test_eval_forks_three_recorded_runs_and_scores_each_fork(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    fake: fake_openai.FakeOpenAI,
) -> None:
    agents = AgentClient(client, task_queue)
    label = f"order-status-{uuid.uuid4().hex[:8]}"
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        originals = []
        for _ in range(3):
            run = await agents.start(scripted_input(support_demo_script(), label=label))
            await run.result()
            originals.append(run.id)
        await eventually(
            lambda: _listed(client, label, 3), what="the three runs to be listed as completed"
        )
        code, out, err = await starter(
            temporal_env,
            "eval",
            "--label",
            label,
            "--fork-step",
            "1",
            "--provider",
            "openai",
            "--model",
            "gpt-fake-mini",
            "--score",
            "tests.fork_scores:names_the_order",
            "--json",
        )
        assert code == 0, err
        report = json.loads(out)
        assert sorted(row["original"] for row in report["runs"]) == sorted(originals)
        for row in report["runs"]:
            assert row["failure"] is None, row
            # The scripted original took 3 steps; the fork answered at step 2, naming the order.
            assert row["score"] == 1.0
            assert (row["original_steps"], row["fork_steps"]) == (3, 2)
            assert row["fork_answer"] == "Your order #1042 is on its way."
            # Its whole usage counts the inherited step; its own is the one model call.
            assert row["fork_usage"]["input_tokens"] > row["fork_own_usage"]["input_tokens"] > 0
            forked = await read_run(client, row["fork"])
            assert forked.input.tool_approval == ToolApprovalPolicy()  # approval on
            assert forked.input.model.provider == "openai"
        totals = report["totals"]
        assert totals["runs"] == totals["completed"] == 3 and totals["failures"] == 0
        assert totals["mean_score"] == 1.0 and totals["equal"] is None
        assert (totals["original_steps"], totals["fork_steps"]) == (9, 6)
        # One model request per fork: steps 1 was inherited, its tool not run again.
        assert len(fake.requests) == 3

        # The table, and the forks are not among the runs a later evaluation forks.
        code, out, err = await starter(
            temporal_env,
            "eval",
            "--label",
            label,
            "--fork-step",
            "1",
            "--provider",
            "openai",
            "--model",
            "gpt-fake-mini",
            "--limit",
            "2",
        )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["original", "fork", "answer", "steps", "tokens", "cost", "failure"]
    assert len([line for line in lines if line.startswith("agent-")]) == 2
    assert "differs" in out  # the answers are not the scripted original's
    assert any(line.startswith("total") and "2 of 2" in line for line in lines)


async def _listed(client: Client, label: str, count: int) -> bool:
    return len(await recent_completed(client, label, count)) == count
