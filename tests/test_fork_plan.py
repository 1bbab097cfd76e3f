"""A fork of a plan-mode run is in plan mode at every step, and its plan counts as approved only
where a person approved the original's plan in the steps the fork inherits: a fork with another
model never changes data that no person agreed to."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.client.agent_client import AgentClient, AgentRun
from durable_agent.client.forking import read_run, scripted_from
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import PlanState
from durable_agent.workflows.model_settings import ModelSettings, ScriptedTurn
from tests.helpers import (
    FAST_MODEL_RETRY,
    TEST_WORKER_OPTIONS,
    call,
    eventually,
    scripted_input,
    turn,
)

TOOLS = ["get_order", "cancel_order", "issue_refund"]
CANCEL = ["Cancel order 104999"]
REFUND = ["Refund 10 on order 1042"]
NOT_OFFERED = "not available until a person approves your plan"


async def waiting_for_plan(run: AgentRun, version: int) -> None:
    async def waits() -> bool:
        status = await run.status()
        plan = status.plan
        return status.status == "awaiting_approval" and plan is not None and plan.version == version

    await eventually(waits, 15, f"{run.id} to wait for a decision on plan v{version}")


async def tools_run(run: AgentRun) -> list[str]:
    """The tool activities the run scheduled, by name (the model's calls left out)."""
    names = []
    async for event in run.handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            if name != "call_model":
                names.append(name)
    return names


async def first_request_tools(run: AgentRun) -> list[str]:
    await eventually(lambda: bool(recorded_requests(run.id)), 15, f"{run.id}'s first request")
    return [spec.name for spec in recorded_requests(run.id)[0].tools]


def scripted_fork(k: int, *turns: ScriptedTurn) -> ModelSettings:
    """Another model: a script played from step k + 1."""
    return ModelSettings(script=scripted_from(k, list(turns)), retry=FAST_MODEL_RETRY)


async def rejected_then_approved(agents: AgentClient) -> AgentRun:
    """A plan-mode run whose plan v1 (to cancel) was rejected at step 1 and whose plan v2 (to
    refund) was approved at step 2; it refunds at step 3 and answers at step 4."""
    script = [
        turn(call("get_order", order_id=104999), call("submit_plan", steps=CANCEL)),
        turn(call("submit_plan", steps=REFUND), expect="refund instead"),
        turn(call("issue_refund", order_id=1042, amount=10), expect="approved plan v2"),
        turn(text="Refunded.", expect='"refunded": true'),
    ]
    original = await agents.start(scripted_input(script, tools=TOOLS, plan=True))
    await waiting_for_plan(original, 1)
    await original.reject_plan("do not cancel; refund instead")
    await waiting_for_plan(original, 2)
    await original.handle.signal(AgentWorkflow.approve_plan)  # a decision by signal, too
    assert (await original.result()).answer == "Refunded."
    return original


@pytest.mark.usefixtures("scripted_requests")
async def test_a_fork_after_a_rejected_plan_plans_again_before_it_changes_data(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await rejected_then_approved(agents)
        # At step 1 the person had rejected the plan to cancel: another model tries anyway.
        forked = await agents.fork(
            original.id,
            step=1,
            model=scripted_fork(
                1,
                turn(call("cancel_order", order_id=104999, reason="customer asked")),
                turn(call("submit_plan", steps=CANCEL), expect=NOT_OFFERED),
                turn(text="Cancelled.", expect="approved plan v2"),
            ),
        )
        assert await first_request_tools(forked) == ["get_order", "submit_plan"]
        await waiting_for_plan(forked, 2)  # numbered on from the original's rejected v1
        status = await forked.status()
        # Nothing had changed data while the fork waits: the refused call never ran.
        assert await tools_run(forked) == []
        assert demo_tools.get_order(104999)["status"] != "cancelled"
        transcript = await forked.transcript()
        await forked.approve_plan(version=2)
        result = await forked.result()

    assert status.plan is not None and status.plan.steps == CANCEL
    assert status.approvals == []  # the plan is the question, not a call
    refused = next(m for m in transcript if m.role == "tool" and m.tool_name == "cancel_order")
    assert refused.is_error and NOT_OFFERED in refused.content
    assert result.answer == "Cancelled." and result.steps == 4


@pytest.mark.usefixtures("scripted_requests")
async def test_a_fork_after_the_approval_starts_with_the_plan_approved(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await rejected_then_approved(agents)
        # Tool approval is on in a fork, and the plan approved at step 2 was that approval.
        forked = await agents.fork(
            original.id,
            step=2,
            model=scripted_fork(
                2,
                turn(call("issue_refund", order_id=1042, amount=20)),
                turn(text="Refunded 20.", expect='"refunded": true'),
            ),
        )
        approved = PlanState(version=2, steps=REFUND, status="approved")
        assert (await forked.status()).plan == approved
        offered = await first_request_tools(forked)
        result = await forked.result()
        asked = (await forked.status()).approvals
        fork_of_the_fork = await read_run(client, forked.id)

    assert {"issue_refund", "cancel_order", "finish"} <= set(offered)
    assert "submit_plan" not in offered
    assert result.answer == "Refunded 20." and result.steps == 4
    assert await tools_run(forked) == ["issue_refund"]
    assert asked == []  # nobody was asked again
    # A fork of the fork inherits the approval it was seeded with.
    for k in (2, 3, 4):
        seed = fork_of_the_fork.fork_input(k).fork
        assert seed is not None and seed.plan == approved, k


async def test_the_seed_holds_the_plan_decided_through_step_k(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await rejected_then_approved(agents)
    recorded = await read_run(client, original.id)

    def seeded(k: int) -> tuple[bool, Any]:
        fork_input = recorded.fork_input(k)
        assert fork_input.fork is not None
        plan = fork_input.fork.plan
        return fork_input.plan, plan and (plan.version, plan.steps, plan.status)

    assert seeded(0) == (True, None)
    assert seeded(1) == (True, (1, CANCEL, "rejected"))
    assert seeded(2) == (True, (2, REFUND, "approved"))
    assert seeded(4) == (True, (2, REFUND, "approved"))


@pytest.mark.usefixtures("scripted_requests")
async def test_a_fork_before_the_plan_was_decided_is_not_approved(
    client: Client, task_queue: str
) -> None:
    agents = AgentClient(client, task_queue)
    script = [
        turn(call("get_order", order_id=1042)),
        turn(call("submit_plan", steps=REFUND)),
        turn(text="Refunded."),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        original = await agents.start(scripted_input(script, tools=TOOLS, plan=True))
        await waiting_for_plan(original, 1)
        # Forked at step 1, while the original's plan (step 2) still waits.
        forked = await agents.fork(
            original.id,
            step=1,
            model=scripted_fork(
                1,
                turn(call("issue_refund", order_id=1042, amount=10)),
                turn(call("submit_plan", steps=REFUND), expect=NOT_OFFERED),
                turn(text="Refunded.", expect="approved plan v1"),
            ),
        )
        assert await first_request_tools(forked) == ["get_order", "submit_plan"]
        await waiting_for_plan(forked, 1)
        assert await tools_run(forked) == []  # nor did step 1's get_order run again
        await forked.approve_plan()
        await original.approve_plan()
        assert (await forked.result()).answer == "Refunded."
        assert (await original.result()).answer == "Refunded."
