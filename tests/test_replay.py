"""Determinism: recorded histories replay through today's workflow code without a mismatch.

A change to the workflow that would break runs already in flight fails here, not in production.
Re-record the committed histories (only when a change is meant to alter behaviour, and after
versioning it with `workflow.patched`) with: RECORD_HISTORIES=1 pytest tests/test_replay.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.demo_script import DEMO_PROMPT, support_demo_script
from tests.helpers import call, run_agent, scripted_input, turn
from workflows.agent import AgentWorkflow
from workflows.models import AgentInput, Limits

HISTORIES = Path(__file__).parent / "histories"


def scenarios() -> dict[str, AgentInput]:
    return {
        "support_demo": scripted_input(support_demo_script(), prompt=DEMO_PROMPT),
        "loop_and_errors": scripted_input(
            [
                turn(call("count_me", key="r"), call("typed", order_id="x", note="n")),
                turn(call("count_me", key="r"), call("nope")),
                turn(call("count_me", key="r"), call("finish", answer=1)),
                turn(call("finish", answer="stuck on count_me"), expect="3 times"),
            ],
            tools=["count_me", "typed"],
        ),
        "step_limit": scripted_input(
            [turn(call("count_me", key=f"s{i}")) for i in range(3)],
            tools=["count_me"],
            limits=Limits(max_steps=2),
        ),
        "limit_with_compensation": scripted_input(
            [
                turn(call("cancel_order", order_id=104999, reason="asked")),
                turn(call("send_email", to="a@b.com", subject="s", body="b")),
                turn(text="never reached"),
            ],
            tools=["cancel_order", "send_email"],
            limits=Limits(max_steps=2),
        ),
    }


def replayer() -> Replayer:
    return Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)


@pytest.mark.parametrize("name", sorted(scenarios()))
async def test_a_fresh_history_replays(client: Client, task_queue: str, name: str) -> None:
    run = await run_agent(client, task_queue, scenarios()[name])
    history = await run.handle.fetch_history()

    result = await replayer().replay_workflow(history)

    assert result.replay_failure is None
    if os.environ.get("RECORD_HISTORIES"):
        (HISTORIES / f"{name}.json").write_text(history.to_json())


@pytest.mark.parametrize("path", sorted(HISTORIES.glob("*.json")), ids=lambda p: p.stem)
async def test_a_committed_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())

    result = await replayer().replay_workflow(history)

    assert result.replay_failure is None


def test_the_committed_histories_are_there() -> None:
    assert {p.stem for p in HISTORIES.glob("*.json")} == set(scenarios())
