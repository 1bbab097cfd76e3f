"""Side effects: applied once per call, recorded, and undone newest first when a run fails."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.testing import ActivityEnvironment

import tests.shared_undo_tools as shared_undo
import tests.tools_for_tests as test_tools
from durable_agent.activities.tools import (
    DEFAULT_TOOLS,
    ToolRegistry,
    current_call,
    make_tool,
    registered_tools,
)
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ToolActivityInput
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import Limits
from durable_agent.workflows.state import CompensationInput
from tests.helpers import TEST_WORKER_OPTIONS, Run, call, run_agent, scripted_input, turn

EFFECTS = ["cancel_order", "issue_refund", "send_email", "count_me"]


def details_of(run: Run) -> dict[str, Any]:
    return dict(run.failure.details[0])


def effects_then_loop() -> list:
    """Three real side effects, then busywork until the step limit."""
    return [
        turn(call("cancel_order", order_id=104999, reason="customer asked")),
        turn(call("issue_refund", order_id=1042, amount=10)),
        turn(call("send_email", to="a@b.com", subject="Done", body="Cancelled and refunded.")),
        turn(call("count_me", key="busy")),
    ]


async def test_a_run_at_its_limit_undoes_its_side_effects_newest_first(
    client: Client, task_queue: str
) -> None:
    agent_input = scripted_input(effects_then_loop(), tools=EFFECTS, limits=Limits(max_steps=3))
    run = await run_agent(client, task_queue, agent_input)

    assert run.failure.type == "AgentStepLimitExceeded"
    records = run.failure.details[0]["compensations"]
    assert [(r["tool"], r["compensation"], r["status"]) for r in records] == [
        ("send_email", "send_correction", "completed"),
        ("issue_refund", "reverse_refund", "completed"),
        ("cancel_order", "reinstate_order", "completed"),
    ]
    assert "max_steps=3 reached" in run.failure.message
    outcomes = [
        c["outcome"] for step in details_of(run)["step_records"] for c in step["tool_calls"]
    ]
    assert outcomes == ["compensated", "compensated", "compensated"]
    assert "send_email call_3_1 undone by send_correction" in run.failure.message
    # The database is back where it was, except for the email, which got its correction.
    assert demo_tools.get_order(104999)["status"] == "processing"
    assert demo_tools.get_order(1042)["refundable"]["amount"] == 129.99
    subjects = [mail["subject"] for mail in demo_tools.outbox()]
    assert subjects == ["Done", "Correction: Done"]
    assert "cannot be unsent" in demo_tools.outbox()[1]["body"]


async def test_a_completed_run_compensates_nothing(client: Client, task_queue: str) -> None:
    script = [*effects_then_loop()[:3], turn(text="All done.")]
    run = await run_agent(client, task_queue, scripted_input(script, tools=EFFECTS))

    assert run.result is not None
    assert demo_tools.get_order(104999)["status"] == "cancelled"
    assert [mail["subject"] for mail in demo_tools.outbox()] == ["Done"]
    history = await run.handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert not {"reinstate_order", "reverse_refund", "send_correction"} & set(scheduled)


async def test_a_failing_compensation_is_reported_and_the_others_still_run(
    client: Client, task_queue: str
) -> None:
    label = f"ok-{uuid.uuid4()}"
    script = [
        turn(call("keyed_effect", label=label)),
        turn(call("doomed_effect", label="doomed")),
        turn(call("write_thing", label="irreversible")),
        turn(call("bad_credential")),
    ]
    tools = ["keyed_effect", "doomed_effect", "write_thing", "bad_credential"]
    run = await run_agent(client, task_queue, scripted_input(script, tools=tools))

    assert run.failure.type == "AgentFatalToolError"
    statuses = [(r["tool"], r["status"]) for r in run.failure.details[0]["compensations"]]
    assert statuses == [
        ("write_thing", "not_undone"),
        ("doomed_effect", "failed"),
        ("keyed_effect", "completed"),
    ]
    assert "the undo service is down" in run.failure.details[0]["compensations"][1]["error"]
    assert "write_thing call_3_1 not undone (it has no compensation)" in run.failure.message
    assert "doomed_effect call_2_1 FAILED to undo" in run.failure.message
    assert label in test_tools.undone


async def test_a_retried_call_keeps_its_idempotency_key(client: Client, task_queue: str) -> None:
    a, b = f"a-{uuid.uuid4()}", f"b-{uuid.uuid4()}"
    script = [
        turn(call("keyed_effect", label=a, fail_first=True), call("keyed_effect", label=b)),
        turn(text="done"),
    ]
    run = await run_agent(client, task_queue, scripted_input(script, tools=["keyed_effect"]))

    assert run.result is not None
    attempts_a = [(key, attempt) for label, key, attempt in test_tools.keys_seen if label == a]
    key_b = next(key for label, key, _ in test_tools.keys_seen if label == b)
    assert [attempt for _, attempt in attempts_a] == [1, 2]
    assert attempts_a[0][0] == attempts_a[1][0] != key_b
    assert attempts_a[0][0].startswith(f"{run.handle.id}/") and attempts_a[0][0].endswith(
        "/call_1_1"
    )


async def test_current_call_is_the_running_call_and_refuses_outside_one() -> None:
    """`current_call().idempotency_key`, as docs/tools.md writes it: the call's own key inside a
    tool's body (a sync one runs in a thread); outside a call there is none, and it says so
    rather than answering None for the next line to trip on."""
    keys: list[str] = []

    def remembers_its_key(order_id: int) -> str:
        keys.append(current_call().idempotency_key)
        return "ok"

    made = make_tool(remembers_its_key)
    assert made.activity is not None
    call_input = ToolActivityInput(
        tool_call_id="call_1", arguments={"order_id": 7}, idempotency_key="run/1/call_1"
    )
    await ActivityEnvironment().run(made.activity, call_input)

    assert keys == ["run/1/call_1"]
    with pytest.raises(RuntimeError, match=r"only known inside a tool, while a call runs it"):
        current_call()


async def test_a_side_effecting_tool_applies_its_effect_once_per_key() -> None:
    activity = registered_tools()["issue_refund"].activity
    call_input = ToolActivityInput(
        tool_call_id="call_1", arguments={"order_id": 1042, "amount": 5}, idempotency_key="k-1"
    )
    env = ActivityEnvironment()

    first = await env.run(activity, call_input)
    again = await env.run(activity, call_input)
    other = await env.run(activity, call_input.model_copy(update={"idempotency_key": "k-2"}))

    assert first.content == again.content  # the retry is answered from the first application
    assert demo_tools.get_order(1042)["refunded"]["amount"] == 10.0  # k-1 once, k-2 once
    assert other.content != first.content
    assert [c["idempotency_key"] for c in demo_tools.applied_calls()] == ["k-1", "k-2"]


async def test_a_cancelled_run_undoes_its_side_effects(client: Client, task_queue: str) -> None:
    script = [
        turn(call("cancel_order", order_id=104998, reason="customer asked")),
        turn(call("block", seconds=30)),
    ]
    agent_input = scripted_input(script, tools=["cancel_order", "block"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"test-{uuid.uuid4()}", task_queue=task_queue
        )
        while (await handle.query(AgentWorkflow.status)).step < 2:
            await asyncio.sleep(0.02)
        assert demo_tools.get_order(104998)["status"] == "cancelled"
        await handle.cancel()
        try:
            await handle.result()
            raise AssertionError("the run should have been cancelled")
        except WorkflowFailureError:
            pass
        description = await handle.describe()
        transcript = await handle.query(AgentWorkflow.transcript)

    assert description.status == WorkflowExecutionStatus.CANCELED
    assert demo_tools.get_order(104998)["status"] == "processing"
    assert transcript[-1].role == "tool"
    assert transcript[-1].content == "Not run: the run was cancelled."


async def test_a_call_that_failed_after_it_started_is_undone_as_outcome_unknown(
    client: Client, task_queue: str
) -> None:
    """It may have taken effect before it failed: the model is told so, and a failed run
    undoes it too (its compensation tolerates an effect that never happened)."""
    script = [
        turn(call("failing_effect", label="e")),
        turn(call("count_me", key="after-failure")),
        turn(text="never reached"),
    ]
    agent_input = scripted_input(
        script, tools=["failing_effect", "count_me"], limits=Limits(max_steps=2)
    )
    run = await run_agent(client, task_queue, agent_input)

    result = run.tool_results()["call_1_1"]
    assert result.startswith("Error: failing_effect failed: ConnectionError.")
    assert "may have taken effect" in result
    records = run.failure.details[0]["compensations"]
    assert [(r["tool"], r["status"], r["outcome_unknown"]) for r in records] == [
        ("failing_effect", "completed", True)
    ]
    assert "failing_effect call_1_1 (outcome unknown" in run.failure.message


async def test_an_effect_whose_outcome_is_unknown_is_found_by_its_key_and_undone() -> None:
    """The demo's compensations look the effect up by the call's idempotency key when the call
    never reported its result: undone if it happened, left alone if it did not."""
    env = ActivityEnvironment()
    key = f"unknown-{uuid.uuid4()}"
    applied = registered_tools()["cancel_order"]
    done = await env.run(
        applied.activity,
        ToolActivityInput(
            tool_call_id="c1",
            arguments={"order_id": 104997, "reason": "customer asked"},
            idempotency_key=key,
        ),
    )
    assert not done.is_error
    assert demo_tools.get_order(104997)["status"] == "cancelled"
    unknown = CompensationInput(
        tool="cancel_order",
        tool_call_id="c1",
        arguments={"order_id": 104997},
        result=None,
        idempotency_key=key,
        outcome_unknown=True,
    )
    assert demo_tools.reinstate_order(unknown)["reinstated"] is True
    assert demo_tools.get_order(104997)["status"] == "processing"
    never = unknown.model_copy(update={"idempotency_key": f"never-{uuid.uuid4()}"})
    assert demo_tools.reinstate_order(never)["reinstated"] is False


async def test_a_huge_return_value_cannot_fail_a_call_after_its_effect(
    client: Client, task_queue: str
) -> None:
    """3 MB kept for the compensation would fail every attempt at the 2 MB payload limit, after
    the effect was applied: the value is not kept, and the call succeeds once."""
    before = test_tools.executions["huge_effect"]
    script = [
        turn(call("huge_effect", size=3_000_000)),
        turn(call("count_me", key="huge-after")),
        turn(text="never reached"),
    ]
    agent_input = scripted_input(
        script, tools=["huge_effect", "count_me"], limits=Limits(max_steps=2)
    )
    run = await run_agent(client, task_queue, agent_input)

    assert test_tools.executions["huge_effect"] == before + 1
    assert not run.transcript[2].is_error  # type: ignore[union-attr]
    records = run.failure.details[0]["compensations"]
    assert [(r["tool"], r["status"]) for r in records] == [("huge_effect", "completed")]


async def test_tools_that_share_a_compensation_serve_and_undo_with_it(
    client: Client, task_queue: str
) -> None:
    """Two tools undone by one function: the worker serves its activity once (it refused to
    start with two activities of one name), and a failed run undoes each tool's call with it."""
    served = [a.__temporal_activity_definition.name for a in DEFAULT_TOOLS.activities()]  # type: ignore[attr-defined]
    assert served.count("undo_note") == 1
    shared_undo.undone.clear()
    run = await run_agent(
        client,
        task_queue,
        scripted_input(
            [
                turn(call("note_a", text="one")),
                turn(call("note_b", text="two")),
                turn(text="never reached"),
            ],
            tools=["note_a", "note_b"],
            limits=Limits(max_steps=2),
        ),
    )
    assert run.failure.type == "AgentStepLimitExceeded"
    assert shared_undo.undone == [("note_b", "two"), ("note_a", "one")]


def test_two_compensations_of_one_name_are_refused() -> None:
    def undo_note(call: CompensationInput) -> None:
        """Another function of the shared one's name."""

    def note_c(text: str) -> str:
        """Write a note in book C."""
        return text

    registry = ToolRegistry()
    registry.add(
        make_tool(shared_undo.note_a, side_effects=True, compensation=shared_undo.undo_note)
    )
    with pytest.raises(ValueError, match="two compensations are named 'undo_note'"):
        registry.add(make_tool(note_c, side_effects=True, compensation=undo_note))
