"""Per-tool approval: a call that needs a person waits, spending nothing, for a decision by update
or signal; a denial or a timeout reaches the model as the call's error result; the run's policy
lets trusted calls through. The waits are observed on the run's progress stream."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.approval import approval_predicate
from durable_agent.workflows.decisions import ToolCallDecision
from durable_agent.workflows.events import AgentEvent
from durable_agent.workflows.inputs import AgentInput, AgentResult, ToolApprovalPolicy
from durable_agent.workflows.transcript import Transcript
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn

TOOLS = ["read_thing", "write_thing", "keyed_effect"]
ASK = ToolApprovalPolicy()


@approval_predicate(name="only_drafts")
def only_drafts(tool: str, arguments: dict[str, Any]) -> bool:
    return str(arguments.get("label", "")).startswith("draft")


def approval_input(script: list[Any], **options: Any) -> AgentInput:
    options.setdefault("tool_approval", ASK)
    return scripted_input(script, tools=TOOLS, **options)


async def start(client: Client, task_queue: str, agent_input: AgentInput) -> AgentRun:
    handle = await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"approve-{uuid.uuid4()}", task_queue=task_queue
    )
    return AgentRun(handle, client)


async def until(agent_run: AgentRun, kind: str, count: int = 1) -> list[AgentEvent]:
    """The run's events up to and including the `count`-th of `kind`."""
    seen: list[AgentEvent] = []
    async for item in agent_run.events():
        seen.append(item.data)
        if sum(e.kind == kind for e in seen) == count:
            return seen
    raise AssertionError(f"the run ended before {count} {kind} events: {seen}")


async def finish(agent_run: AgentRun) -> tuple[AgentResult, list[Any]]:
    result = await agent_run.result()
    transcript = await agent_run.transcript()
    assert Transcript(messages=transcript).is_complete()
    return result, transcript


def results(transcript: list[Any]) -> dict[str, Any]:
    return {m.tool_call_id: m for m in transcript if m.role == "tool"}


async def test_a_side_effecting_call_waits_while_the_others_run(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(
            call("read_thing", label="r1"),
            call("write_thing", label="w1"),
            call("read_thing", label="r2"),
        ),
        turn(text="done", expect="done w1"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script))
        events = await until(agent_run, "approval_requested")
        requested = events[-1]
        assert (requested.tool, requested.call_id) == ("write_thing", "call_1_2")
        assert json.loads(requested.arguments or "") == {"label": "w1"}
        status = await agent_run.status()
        assert status.status == "awaiting_approval"
        assert "write_thing" in status.details and "w1" in status.details
        assert [a.call_id for a in await agent_run.pending_tool_calls()] == ["call_1_2"]
        # The read-only call before the side-effecting one ran without waiting for anyone.
        await until(agent_run, "tool_call_finished")
        assert ("end", "r1") in test_tools.events
        assert ("start", "w1") not in test_tools.events

        decided = await agent_run.decide_tool_call("call_1_2", approve=True)
        assert decided.status == "approved" and decided.decided_by == "person"
        result, transcript = await finish(agent_run)
    assert result.answer == "done"
    assert results(transcript)["call_1_2"].content == "done w1"
    # In the model's order: r1, then the approved w1 alone, then r2.
    assert [label for kind, label in test_tools.events if kind == "start"] == ["r1", "w1", "r2"]
    calls = {c.id: c for c in result.step_records[0].tool_calls}
    assert calls["call_1_2"].outcome == "ok"


async def test_a_denial_reaches_the_model_with_the_persons_reason(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1")),
        turn(text="I will not write it.", expect="not today"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script))
        await until(agent_run, "approval_requested")
        denied = await agent_run.decide_tool_call("call_1_1", approve=False, reason="not today")
        assert denied.status == "denied" and denied.reason == "not today"
        result, transcript = await finish(agent_run)
    denial = results(transcript)["call_1_1"]
    assert denial.is_error and "a person denied this call to write_thing: not today" in (
        denial.content
    )
    assert not test_tools.events, "a denied call must not run"
    assert result.step_records[0].tool_calls[0].outcome == "denied"


async def test_remember_approves_the_tools_later_calls_without_asking(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1")),
        turn(call("write_thing", label="w2")),
        turn(call("keyed_effect", label="k1")),
        turn(text="done"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script))
        await until(agent_run, "approval_requested")
        await agent_run.decide_tool_call("call_1_1", approve=True, remember=True)
        # The next write_thing call runs without a question; keyed_effect, another tool, asks.
        events = await until(agent_run, "approval_requested", count=2)
        assert events[-1].tool == "keyed_effect"
        assert ("end", "w2") in test_tools.events
        await agent_run.decide_tool_call("call_3_1", approve=True)
        await finish(agent_run)
    assert [label for kind, label in test_tools.events if kind == "start"] == ["w1", "w2"]


async def test_no_decision_in_time_denies_the_call(client: Client, task_queue: str) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1")),
        turn(text="Nobody approved it.", expect="within 0.5 s"),
    ]
    agent_input = approval_input(script, approval_timeout_seconds=0.5)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        events = await until(agent_run, "approval_decided")
        assert events[-1].outcome == "timed_out"
        result, transcript = await finish(agent_run)
    assert results(transcript)["call_1_1"].is_error
    assert not test_tools.events
    assert result.answer == "Nobody approved it."


async def test_the_validator_refuses_unknown_and_decided_calls(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("write_thing", label="w1")), turn(text="done")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script))
        await until(agent_run, "approval_requested")
        with pytest.raises(WorkflowUpdateFailedError) as unknown:
            await agent_run.decide_tool_call("call_9_9", approve=True)
        assert "no tool call 'call_9_9' asked for approval" in str(unknown.value.cause)
        assert "waiting: call_1_1" in str(unknown.value.cause)
        await agent_run.decide_tool_call("call_1_1", approve=True)
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await agent_run.decide_tool_call("call_1_1", approve=False, reason="too late")
        assert "decided already: approved" in str(again.value.cause)
        await finish(agent_run)


async def test_a_signal_decides_like_the_update(client: Client, task_queue: str) -> None:
    """`temporal workflow signal --name decide_tool_call --input '{...}'` works the same."""
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1"), call("write_thing", label="w2")),
        turn(text="done", expect="no w2"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script))
        await until(agent_run, "approval_requested", count=2)
        handle: WorkflowHandle[Any, Any] = agent_run.handle
        # An unknown id is ignored (a signal cannot be refused), and the run goes on waiting.
        await handle.signal("decide_tool_call", {"call_id": "nope", "approve": True})
        await handle.signal("decide_tool_call", {"call_id": "call_1_1", "approve": True})
        await handle.signal(
            "decide_tool_call",
            ToolCallDecision(call_id="call_1_2", approve=False, reason="no w2"),
        )
        result, transcript = await finish(agent_run)
    assert results(transcript)["call_1_1"].content == "done w1"
    assert "no w2" in results(transcript)["call_1_2"].content
    assert [c.outcome for c in result.step_records[0].tool_calls] == ["ok", "denied"]


@pytest.mark.parametrize(
    "policy",
    [
        ToolApprovalPolicy(approve_all=True),
        ToolApprovalPolicy(allow=["write_thing", "keyed_effect"]),
        ToolApprovalPolicy(predicates=["only_drafts"]),
    ],
    ids=["approve_all", "allow_list", "predicate"],
)
async def test_the_runs_policy_lets_trusted_calls_run_without_asking(
    client: Client, task_queue: str, policy: ToolApprovalPolicy
) -> None:
    script = [
        turn(call("write_thing", label="draft-1"), call("keyed_effect", label="draft-2")),
        turn(text="done"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        result, _ = await finish(agent_run)
        kinds = [item.data.kind async for item in agent_run.events()]
    assert "approval_requested" not in kinds
    assert [c.outcome for c in result.step_records[0].tool_calls] == ["ok", "ok"]


async def test_a_predicate_that_declines_leaves_the_call_to_a_person(
    client: Client, task_queue: str
) -> None:
    script = [turn(call("write_thing", label="final")), turn(text="done")]
    policy = ToolApprovalPolicy(predicates=["only_drafts"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        await until(agent_run, "approval_requested")
        await agent_run.decide_tool_call("call_1_1", approve=True)
        await finish(agent_run)


async def test_an_unknown_predicate_fails_the_run_at_once(client: Client, task_queue: str) -> None:
    script = [turn(text="never")]
    policy = ToolApprovalPolicy(predicates=["no_such_rule"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, approval_input(script, tool_approval=policy))
        with pytest.raises(Exception, match="no_such_rule"):
            await agent_run.result()


async def test_a_remembered_decision_outlives_continue_as_new(
    client: Client, task_queue: str
) -> None:
    test_tools.events.clear()
    script = [
        turn(call("write_thing", label="w1")),
        turn(call("write_thing", label="w2")),
        turn(text="done"),
    ]
    agent_input = approval_input(script, continue_as_new_after_steps=1)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await start(client, task_queue, agent_input)
        await until(agent_run, "approval_requested")
        await agent_run.decide_tool_call("call_1_1", approve=True, remember=True)
        result, _ = await finish(agent_run)
        events = [item.data async for item in agent_run.events()]
    assert [e.kind for e in events].count("continued_as_new") >= 1
    assert [e.call_id for e in events if e.kind == "approval_requested"] == ["call_1_1"]
    assert [label for kind, label in test_tools.events if kind == "start"] == ["w1", "w2"]
    assert result.steps == 3
