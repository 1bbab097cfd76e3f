"""agent_client: start a run, find it while its plan waits, read it, decide on it, and get its
result or its failure, against the session's dev server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterable

import pytest
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError

from durable_agent.client.agent_client import AgentClient, AgentRun, AgentRunFailed
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.decisions import PlanState
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.transcript import AssistantMessage, UserMessage
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, scripted_input, turn

TOOLS = ["get_order", "cancel_order", "issue_refund", "write_thing"]
PLAN = ["Check order 104999", "Cancel it"]


def plan_input(script: list, **options: object) -> AgentInput:
    return scripted_input(script, tools=TOOLS, plan=True, **options)  # type: ignore[arg-type]


async def end_leftovers(agents: AgentClient, workflow_ids: Iterable[str]) -> None:
    """Cancel the runs a failed test left running, while their worker still serves them: a
    worker that stops under a waiting run tears the run down mid-wait, and pytest reports
    that as an error of the whole session."""
    for workflow_id in workflow_ids:
        run = agents.run(workflow_id)
        with contextlib.suppress(RPCError, AgentRunFailed, TimeoutError):
            if (await run.handle.describe()).status == WorkflowExecutionStatus.RUNNING:
                await run.handle.cancel()
                await asyncio.wait_for(run.result(), 10)


class TrackingClient(AgentClient):
    """An AgentClient that remembers what it started, for end_leftovers."""

    started: list[str]

    async def start(self, agent_input: AgentInput, *, workflow_id: str | None = None) -> AgentRun:
        run = await super().start(agent_input, workflow_id=workflow_id)
        self.started.append(run.id)
        return run


@contextlib.asynccontextmanager
async def serving(client: Client, task_queue: str) -> AsyncIterator[TrackingClient]:
    """A worker for the test's task queue, and a client whose runs end before it stops."""
    agents = TrackingClient(client, task_queue)
    agents.started = []
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        try:
            yield agents
        finally:
            await end_leftovers(agents, agents.started)


async def waiting_plan(run: AgentRun, version: int = 1) -> PlanState:
    async def waits() -> bool:
        status = await run.status()
        return status.status == "awaiting_approval" and (
            status.plan is not None and status.plan.version == version
        )

    await eventually(waits, 15, f"plan v{version} to await approval")
    plan = (await run.status()).plan
    assert plan is not None
    return plan


async def test_a_plan_is_found_read_approved_and_carried_out(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("get_order", order_id=104999), call("submit_plan", steps=PLAN)),
        turn(call("cancel_order", order_id=104999, reason="asked"), expect="go ahead"),
        turn(text="Cancelled.", expect='"cancelled": true'),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(plan_input(script), workflow_id=f"client-{task_queue}")
        assert run.id == f"client-{task_queue}"
        await waiting_plan(run)

        async def listed() -> bool:
            return run.id in [r.id async for r in agents.awaiting_approval()]

        await eventually(listed, 15, "the run among those awaiting approval")
        status = await run.status()
        assert status.plan == PlanState(version=1, steps=PLAN, status="awaiting_approval")
        # Both results are appended once the plan is decided, in call order.
        assert status.step == 1 and status.pending_tool_calls == ["call_1_1", "call_1_2"]
        transcript = await run.transcript()
        assert isinstance(transcript[0], UserMessage)
        assert isinstance(transcript[1], AssistantMessage)
        assert [c.name for c in transcript[1].tool_calls] == ["get_order", "submit_plan"]

        # The same run, found again by its id, as another process would.
        decided = await agents.run(run.id).approve_plan("go ahead")
        result = await run.result()
        final = await run.status()

    assert decided == PlanState(version=1, steps=PLAN, status="approved", comment="go ahead")
    assert result.answer == "Cancelled." and result.steps == 3
    assert final.status == "completed" and final.plan is not None
    assert final.plan.status == "approved"


async def test_a_rejected_plan_is_planned_again_and_approved_by_version(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("submit_plan", steps=PLAN)),
        turn(call("submit_plan", steps=["Refund 10 on 1042"]), expect="refund instead"),
        turn(text="Refund done.", expect="approved plan v2"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(plan_input(script))
        await waiting_plan(run, version=1)
        rejected = await run.reject_plan("do not cancel; refund instead", version=1)
        second = await waiting_plan(run, version=2)
        approved = await run.approve_plan(version=2)
        result = await run.result()
        transcript = await run.transcript()

    assert rejected.status == "rejected" and rejected.comment == "do not cancel; refund instead"
    assert second.steps == ["Refund 10 on 1042"]
    assert approved.status == "approved" and approved.version == 2
    assert result.answer == "Refund done."
    people = [m.content for m in transcript if isinstance(m, UserMessage)]
    assert people[1] == "do not cancel; refund instead"


async def test_a_decision_the_run_cannot_take_raises_with_the_reason(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("get_order", order_id=1042)),
        turn(call("submit_plan", steps=PLAN), expect="1042"),
        turn(text="ok", expect="approved plan v1"),
    ]
    async with serving(client, task_queue) as agents:
        run = await agents.start(plan_input(script))

        async def refusal(decide: Awaitable[PlanState]) -> str:
            with pytest.raises(WorkflowUpdateFailedError) as failure:
                await decide
            return str(failure.value.cause)

        assert "no plan is waiting" in await refusal(run.approve_plan())
        await waiting_plan(run)
        stale = await refusal(run.approve_plan(version=2))
        assert "plan version 2 is not the one waiting: version 1 is" in stale
        assert "needs feedback" in await refusal(run.reject_plan("  "))
        # Nothing was decided by the refusals: the plan still waits, and can be approved.
        assert (await run.status()).status == "awaiting_approval"
        await run.approve_plan(version=1)
        assert (await run.result()).answer == "ok"


async def test_a_failed_run_raises_with_its_type_and_details(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(call("write_thing", label="x")),
        turn(text="never reached"),
    ]
    agent_input = scripted_input(script, tools=TOOLS, limits=Limits(max_steps=2))
    async with serving(client, task_queue) as agents:
        run = await agents.start(agent_input)
        with pytest.raises(AgentRunFailed) as failed:
            await run.result()
        final = await run.status()

    error = failed.value
    assert error.workflow_id == run.id
    assert error.type == "AgentStepLimitExceeded"
    assert error.message.startswith("max_steps=2")
    assert str(error).startswith(f"run {run.id} failed: AgentStepLimitExceeded: max_steps=2")
    assert error.details.steps == 2 and len(error.details.step_records) == 2
    assert error.details.usage.input_tokens > 0
    assert [(c.tool, c.tool_call_id, c.status) for c in error.details.compensations] == [
        ("write_thing", "call_2_1", "not_undone"),
        ("cancel_order", "call_1_1", "completed"),
    ]
    assert final.status == "failed"


async def test_a_transcript_larger_than_a_query_may_answer_is_read_in_pages(
    client: Client, task_queue: str
) -> None:
    """A query's answer may have at most 2 MB: the `transcript` query fails past it, and
    AgentRun.transcript() reads the same messages page by page."""
    script = [turn(call("huge", size=800_000 + n)) for n in range(3)] + [turn(text="done")]
    agent_input = scripted_input(script, tools=["huge"], externalise_results=False)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await AgentClient(client, task_queue).start(agent_input)
        await run.result()
        with pytest.raises(WorkflowQueryFailedError, match="size exceeds limit"):
            await run.handle.query("transcript")
        transcript = await run.transcript()
    assert [m.role for m in transcript] == ["user", *["assistant", "tool"] * 3, "assistant"]
    results = [m for m in transcript if m.role == "tool"]
    assert [len(m.content) for m in results] == [800_000, 800_001, 800_002]
