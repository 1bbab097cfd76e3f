"""docs/side-effects.md's compensation, run as it stands there against the session's dev server:
a failed run's holds are released, those whose outcome is unknown included."""

from __future__ import annotations

import functools
import json
import sqlite3
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.activities.tools import current_call
from durable_agent.workflows.inputs import Limits
from tests.helpers import call, run_agent, scripted_input, turn

DOC = Path(__file__).resolve().parent.parent / "docs" / "side-effects.md"


@functools.cache
def documented_example() -> types.ModuleType:
    """The section's code, as a module of its own. Once a process: its @tool registers."""
    section = DOC.read_text().split("\n## A compensation, whole\n", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType("side_effects_example")
    exec(compile(code, str(DOC), "exec"), module.__dict__)
    return module


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = documented_example()
    monkeypatch.setattr(module, "DATABASE", str(tmp_path / "holds.db"))
    return module


def lose_the_reply_of(example: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Faults in the tool's calls, around the documented transaction: call_2_1's hold is
    written and then its reply is lost; call_3_1 fails before it writes anything. Both raise
    what a gateway's unreadable reply would (a ValueError: not retried, outcome unknown)."""
    documented = example.transaction

    @contextmanager
    def transaction() -> Iterator[sqlite3.Connection]:
        try:
            call_id: str | None = current_call().tool_call_id
        except RuntimeError:  # in a compensation, which is no tool call: it runs as documented
            call_id = None
        if call_id == "call_3_1":
            raise ValueError("the warehouse's reply could not be read")
        with documented() as db:
            yield db
        if call_id == "call_2_1":  # committed: the hold is there
            raise ValueError("the warehouse's reply could not be read")

    monkeypatch.setattr(example, "transaction", transaction)


def holds(example: types.ModuleType) -> dict[str, int]:
    """Each hold's SKU and whether it was released."""
    with sqlite3.connect(example.DATABASE) as db:
        return dict(db.execute("SELECT sku, released FROM holds ORDER BY sku").fetchall())


async def undo_results(run: Any) -> list[dict[str, Any]]:
    """What each release_hold returned, in the order they ran, from the run's history."""
    history = await run.handle.fetch_history()
    types_by_event = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    returned = []
    for e in history.events:
        if e.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            continue
        completed = e.activity_task_completed_event_attributes
        if types_by_event[completed.scheduled_event_id] == "release_hold":
            returned.append(json.loads(json.loads(completed.result.payloads[0].data)))
    return returned


async def test_a_failed_run_releases_its_holds_outcome_unknown_or_not(
    client: Client, task_queue: str, example: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    lose_the_reply_of(example, monkeypatch)
    script = [
        turn(call("hold_stock", sku="sku-1", quantity=2)),
        turn(call("hold_stock", sku="sku-2", quantity=1)),
        turn(call("hold_stock", sku="sku-3", quantity=5)),
        turn(text="never played: the run stops at its step limit first"),
    ]
    agent_input = scripted_input(script, tools=["hold_stock"], limits=Limits(max_steps=3))
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    told = run.tool_results()
    assert "It may have taken effect before it stopped" in told["call_2_1"]
    assert "It may have taken effect before it stopped" in told["call_3_1"]
    records = run.failure.details[0]["compensations"]
    assert [(r["tool_call_id"], r["status"], r["outcome_unknown"]) for r in records] == [
        ("call_3_1", "completed", True),
        ("call_2_1", "completed", True),
        ("call_1_1", "completed", False),
    ]
    assert "hold_stock call_1_1 undone by release_hold" in run.failure.message
    # Every hold that was written is released; the third call wrote none, and its undo found
    # nothing and said so.
    assert holds(example) == {"sku-1": 1, "sku-2": 1}
    assert await undo_results(run) == [
        {"released": 0, "outcome_unknown": True},
        {"released": 1, "outcome_unknown": True},
        {"released": 1, "outcome_unknown": False},
    ]


async def test_a_completed_run_keeps_its_holds(
    client: Client, task_queue: str, example: types.ModuleType
) -> None:
    script = [turn(call("hold_stock", sku="sku-1", quantity=2)), turn(text="Held.")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["hold_stock"]))

    assert run.result is not None and run.result.answer == "Held."
    assert holds(example) == {"sku-1": 0}
