"""Plan mode: the run waits, spending nothing, for a person's decision by signal or update;
the waiting run is found through its search attributes, from the SDK and the Web UI's API."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

import pytest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)

from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.serving.dev_server import embedded_dev_server, free_port
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import PlanDecision
from durable_agent.workflows.inputs import AgentInput, AgentResult
from durable_agent.workflows.status import RunStatus
from durable_agent.workflows.transcript import UserMessage
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, scripted_input, turn

TOOLS = ["get_order", "cancel_order", "issue_refund"]
PLAN = ["Check order 104999", "Cancel it"]


def plan_input(script: list, **options: Any) -> AgentInput:
    return scripted_input(script, tools=TOOLS, plan=True, **options)


async def status_of(handle: WorkflowHandle[Any, AgentResult]) -> RunStatus:
    return await handle.query(AgentWorkflow.status)


async def awaiting(handle: WorkflowHandle[Any, AgentResult], version: int = 1) -> RunStatus:
    async def waiting() -> bool:
        status = await status_of(handle)
        return (
            status.status == "awaiting_approval"
            and status.plan is not None
            and (status.plan.version == version)
        )

    await eventually(waiting, 10, f"plan v{version} to await approval")
    return await status_of(handle)


async def start(client: Client, task_queue: str, agent_input: AgentInput) -> WorkflowHandle:
    return await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"plan-{uuid.uuid4()}", task_queue=task_queue
    )


@pytest.mark.usefixtures("scripted_requests")
async def test_approval_by_signal_unlocks_the_tools_that_change_data(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("get_order", order_id=104999), call("submit_plan", steps=PLAN)),
        turn(call("cancel_order", order_id=104999, reason="asked"), expect="approved plan v1"),
        turn(text="Cancelled.", expect='"cancelled": true'),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script))
        status = await awaiting(handle)
        assert status.plan is not None and status.plan.steps == PLAN
        assert "approve_plan" in status.details
        # Waiting spends nothing: one model call so far, and still one after a round trip.
        await handle.query(AgentWorkflow.transcript)
        assert len(recorded_requests(handle.id)) == 1

        await handle.signal(AgentWorkflow.approve_plan, "go ahead")
        result = await handle.result()
        transcript = await handle.query(AgentWorkflow.transcript)

    assert result.answer == "Cancelled."
    first, second, _ = recorded_requests(handle.id)
    assert [t.name for t in first.tools] == ["get_order", "submit_plan"]
    assert {"cancel_order", "issue_refund", "finish"} <= {t.name for t in second.tools}
    plan_result = next(m for m in transcript if m.role == "tool" and m.tool_call_id == "call_1_2")
    assert "approved plan v1" in plan_result.content and "go ahead" in plan_result.content


async def test_rejection_feedback_is_the_persons_message_and_the_model_plans_again(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("submit_plan", steps=PLAN)),
        turn(call("submit_plan", steps=["Refund 10 on 1042"]), expect="refund instead"),
        turn(text="Refund planned and approved.", expect="approved plan v2"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script))
        await awaiting(handle, version=1)
        await handle.signal(AgentWorkflow.reject_plan, "do not cancel; refund instead")
        await awaiting(handle, version=2)
        decided = await handle.execute_update(
            AgentWorkflow.decide_plan, PlanDecision(approve=True, version=2)
        )
        result = await handle.result()
        transcript = await handle.query(AgentWorkflow.transcript)

    assert decided.status == "approved" and decided.version == 2
    assert result.steps == 3
    people = [m.content for m in transcript if isinstance(m, UserMessage)]
    assert people[1] == "do not cancel; refund instead"


async def test_decide_plan_refuses_what_cannot_be_decided(client: Client, task_queue: str) -> None:
    script = [
        turn(call("get_order", order_id=1042)),
        turn(call("submit_plan", steps=PLAN), expect="1042"),
        turn(call("submit_plan", steps=PLAN), expect="too vague"),
        turn(text="ok"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script))

        async def refused(decision: PlanDecision) -> str:
            with pytest.raises(WorkflowUpdateFailedError) as failure:
                await handle.execute_update(AgentWorkflow.decide_plan, decision)
            return str(failure.value.cause)

        assert "no plan is waiting" in await refused(PlanDecision(approve=True))
        await awaiting(handle, version=1)
        assert "needs feedback" in await refused(PlanDecision(approve=False))
        await handle.execute_update(
            AgentWorkflow.decide_plan, PlanDecision(approve=False, comment="too vague")
        )
        await awaiting(handle, version=2)
        message = await refused(PlanDecision(approve=True, version=1))
        assert "plan version 1 is not the one waiting: version 2 is" in message
        await handle.signal(AgentWorkflow.approve_plan)
        assert (await handle.result()).answer == "ok"


async def test_changing_data_before_approval_is_refused(client: Client, task_queue: str) -> None:
    script = [
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(call("finish", answer="x"), expect="not available until a person approves"),
        turn(text="I will plan first.", expect="submit your plan"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script))
        result = await handle.result()

    assert result.answer == "I will plan first."


@pytest.mark.usefixtures("scripted_requests")
async def test_an_unanswered_plan_times_out(client: Client, task_queue: str) -> None:
    script = [turn(call("submit_plan", steps=PLAN)), turn(text="never")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script, approval_timeout_seconds=0.5))
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()

    assert failure.value.cause.type == "AgentApprovalTimeout"  # type: ignore[attr-defined]
    assert "plan v1 waited 0.5 s" in str(failure.value.cause)
    assert len(recorded_requests(handle.id)) == 1


async def test_the_waiting_run_is_found_by_its_search_attributes(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("submit_plan", steps=PLAN)), turn(text="done")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script))
        await awaiting(handle)

        async def listed(query: str) -> bool:
            return handle.id in [w.id async for w in client.list_workflows(query)]

        await eventually(
            lambda: listed("AgentStatus='awaiting_approval'"), 10, "the listing as awaiting"
        )
        await handle.signal(AgentWorkflow.approve_plan)
        await handle.result()
        await eventually(
            lambda: listed("AgentStatus='completed' AND AgentStep=2"), 10, "the listing as done"
        )
        assert not await listed("AgentStatus='awaiting_approval'")


async def test_the_web_ui_api_lists_the_waiting_run() -> None:
    ui_port = free_port()
    task_queue = f"ui-{uuid.uuid4()}"
    async with (
        embedded_dev_server(ui_port=ui_port) as env,
        build_worker(env.client, task_queue, **TEST_WORKER_OPTIONS),
    ):
        script = [turn(call("submit_plan", steps=PLAN)), turn(text="done")]
        handle = await start(env.client, task_queue, plan_input(script))
        await awaiting(handle)
        query = urllib.parse.quote('AgentStatus="awaiting_approval"')
        url = f"http://127.0.0.1:{ui_port}/api/v1/namespaces/default/workflows?query={query}"

        async def in_ui() -> bool:
            try:
                body = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(url, timeout=5).read()
                )
            except urllib.error.URLError:  # the UI answers 503 while it starts
                return False
            executions = json.loads(body).get("executions") or []
            return handle.id in [e["execution"]["workflowId"] for e in executions]

        await eventually(in_ui, 20, "the Web UI to list the waiting run")
        await handle.signal(AgentWorkflow.approve_plan)
        await handle.result()


async def test_a_plan_that_times_out_keeps_the_results_of_the_calls_that_ran(
    client: Client, task_queue: str
) -> None:
    """The read-only call in the same reply ran: its result and its trace record stay as they
    were, and only the plan's call says it timed out (not "Not run")."""
    script = [
        turn(call("get_order", order_id=1042), call("submit_plan", steps=PLAN)),
        turn(text="never"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await start(client, task_queue, plan_input(script, approval_timeout_seconds=0.5))
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        transcript = await handle.query(AgentWorkflow.transcript)
        trace = await handle.query(AgentWorkflow.trace)

    results = {m.tool_call_id: m for m in transcript if m.role == "tool"}
    looked_up, plan = results["call_1_1"], results["call_1_2"]
    assert not looked_up.is_error and "1042" in looked_up.content
    assert plan.is_error and "waited 0.5 s for a decision" in plan.content
    outcomes = [(c.name, c.outcome) for c in trace[0].tool_calls]
    assert outcomes == [("get_order", "ok"), ("submit_plan", "error")]
