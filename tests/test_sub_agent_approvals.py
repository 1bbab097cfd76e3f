"""A sub-agent's calls that wait for a person show in its parent's status, and are decided
through the parent: by the update and the signal, from the client and from the CLI in a
subprocess. The parent forwards the decision to the sub-agent, which takes it as its own."""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from durable_agent.client.agent_client import AgentRun, AgentRunFailed
from durable_agent.demo import tools as demo_tools
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.decisions import ToolCallDecision
from durable_agent.workflows.inputs import AgentInput, ToolApprovalPolicy
from durable_agent.workflows.status import AGENT_STATUS, RunStatus
from tests.helpers import call, eventually, scripted_input, turn
from tests.test_agent_client import serving
from tests.test_sub_agents import child_model
from tests.test_tool_approval import until

REPO = Path(__file__).resolve().parent.parent
CANCEL = "call_1_1/call_1_1"
"""The sub-agent's first call (cancel_order), as its parent names it."""
REFUND = "call_1_1/call_2_1"
"""Its second (issue_refund)."""


def delegating_input() -> AgentInput:
    """A parent that hands the whole job to a sub-agent, whose two calls change data and so
    wait for a person (the default policy)."""
    child = child_model(
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(call("issue_refund", order_id=1042, amount=10), expect='"cancelled": true'),
        turn(text="Cancelled 104999; the refund was refused.", expect="no refunds today"),
    )
    script = [
        turn(call("delegate", task="Cancel 104999 and refund 10 on 1042.")),
        turn(text="The sub-agent cancelled it; no refund.", expect="the refund was refused"),
    ]
    return scripted_input(
        script,
        tools=["cancel_order", "issue_refund"],
        sub_agents=True,
        sub_agent_model=child,
        tool_approval=ToolApprovalPolicy(),
    )


async def waiting_in_sub_agent(run: AgentRun, call_id: str) -> RunStatus:
    """The parent's status once it shows the sub-agent's `call_id` waiting."""
    status: RunStatus | None = None

    async def shown() -> bool:
        nonlocal status
        status = await run.status()
        return any(a.call_id == call_id for a in status.sub_agent_approvals)

    await eventually(shown, what=f"{call_id} to wait in the parent's status")
    assert status is not None
    return status


async def test_the_parent_shows_the_sub_agents_calls_and_forwards_decisions(
    client: Client, task_queue: str
) -> None:
    async with serving(client, task_queue) as agents:
        run = await agents.start(delegating_input())
        child_id = f"{run.id}/call_1_1"

        status = await waiting_in_sub_agent(run, CANCEL)
        assert status.status == "awaiting_approval"
        assert status.approvals == []  # nothing of the parent's own waits
        (waiting,) = status.sub_agent_approvals
        assert (waiting.call_id, waiting.workflow_id, waiting.tool, waiting.status) == (
            CANCEL,
            child_id,
            "cancel_order",
            "awaiting_approval",
        )
        assert json.loads(waiting.arguments) == {"order_id": 104999, "reason": "asked"}
        assert f"cancel_order {waiting.arguments} ({CANCEL}, a sub-agent's)" in status.details
        assert [a.call_id for a in await run.pending_tool_calls()] == [CANCEL]

        async def parent_attribute_waits() -> bool:
            described = await run.handle.describe()
            return described.typed_search_attributes.get(AGENT_STATUS) == "awaiting_approval"

        await eventually(parent_attribute_waits, what="the parent's AgentStatus")

        # A call id the sub-agent does not wait on is refused with the reason, as the parent's
        # own would be; nothing is sent on.
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await run.decide_tool_call("call_1_1/call_9_9", approve=True)
        assert refused.value.cause.message == (
            "no tool call 'call_1_1/call_9_9' asked for approval in this run or its sub-agent "
            f"(waiting: {CANCEL})"
        )

        # By update: it answers once the sub-agent took the decision.
        decided = await run.decide_tool_call(CANCEL, approve=True)
        assert (decided.call_id, decided.status, decided.decided_by) == (
            CANCEL,
            "approved",
            "person",
        )
        with pytest.raises(WorkflowUpdateFailedError) as again:
            await run.decide_tool_call(CANCEL, approve=False, reason="changed my mind")
        assert again.value.cause.message.startswith(
            f"tool call {CANCEL!r} is decided already: approved"
        )

        # By signal, as the `temporal` CLI and the Web UI send it.
        await waiting_in_sub_agent(run, REFUND)
        denial = ToolCallDecision(call_id=REFUND, approve=False, reason="no refunds today")
        await run.handle.signal("decide_tool_call", denial)

        result = await run.result()
        assert result.answer == "The sub-agent cancelled it; no refund."
        final = await run.status()
        assert final.status == "completed" and final.sub_agent_approvals == []
        events = [e for e in await until(run, "completed") if e.kind.startswith("approval")]
        assert [(e.kind, e.call_id, e.outcome) for e in events] == [
            ("approval_requested", CANCEL, None),
            ("approval_decided", CANCEL, "approved"),
            ("approval_requested", REFUND, None),
            ("approval_decided", REFUND, "denied"),
        ]

        # The sub-agent decided them as its own, by a person, and its model saw the reason.
        child = agents.run(child_id)
        child_approvals = {a.call_id: a for a in (await child.status()).approvals}
        assert child_approvals == {}  # none waits; the decisions are in its trace
        child_result = await child.result()
        outcomes = [c.outcome for r in child_result.step_records for c in r.tool_calls]
        assert outcomes == ["ok", "denied"]
        child_transcript = await child.transcript()
        denied = next(m for m in child_transcript if getattr(m, "tool_call_id", "") == "call_2_1")
        assert "a person denied this call to issue_refund: no refunds today" in denied.content

        histories = [
            await client.get_workflow_handle(workflow_id).fetch_history()
            for workflow_id in (run.id, child_id)
        ]
    assert demo_tools.get_order(104999)["status"] == "cancelled"
    assert demo_tools.get_order(1042)["refundable"]["amount"] == 129.99
    # The signals both ways and the forwarding replay without a mismatch.
    replayer = Replayer(workflows=[AgentWorkflow], data_converter=pydantic_data_converter)
    for history in histories:
        replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        assert replayed.replay_failure is None, history.workflow_id


async def starter(address: str, *argv: str) -> asyncio.subprocess.Process:
    """starter.py in a subprocess, as a person at a terminal runs it."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *argv,
        "--address",
        address,
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def cli(address: str, *argv: str) -> tuple[int, str, str]:
    """One command to its end: its exit status, stdout and stderr."""
    process = await starter(address, *argv)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_cli_lists_and_decides_a_sub_agents_calls_through_the_parent(
    client: Client, task_queue: str
) -> None:
    address = client.service_client.config.target_host
    async with serving(client, task_queue) as agents:
        run = await agents.start(delegating_input())
        # `result` follows the parent and says how to decide what its sub-agent waits on.
        following = await starter(address, "result", run.id)
        await waiting_in_sub_agent(run, CANCEL)

        code, out, err = await cli(address, "calls", run.id, "--json")
        assert code == 0, err
        (listed,) = json.loads(out)
        assert (listed["call_id"], listed["tool"], listed["workflow_id"]) == (
            CANCEL,
            "cancel_order",
            f"{run.id}/call_1_1",
        )
        code, out, err = await cli(address, "calls", run.id)
        assert code == 0, err
        assert out.startswith(f"{CANCEL}  step 1  cancel_order {{")
        assert out.rstrip().endswith(f"(sub-agent {run.id}/call_1_1)")

        async def listed_once() -> bool:
            code, out, err = await cli(address, "list", "--awaiting-approval")
            assert code == 0, err
            return f"{run.id}  tool call {CANCEL}: cancel_order" in out

        await eventually(listed_once, timeout=30, interval=0.2)
        code, out, err = await cli(address, "list", "--awaiting-approval")
        # The sub-agent waits too, but its call is its parent's row, not a row of its own.
        assert f"{run.id}/call_1_1  " not in out

        code, out, err = await cli(address, "approve-call", run.id, "call_1_1/call_9_9")
        assert code == 1 and out == ""
        assert err.strip() == (
            f"cannot approve call_1_1/call_9_9 of {run.id}: no tool call 'call_1_1/call_9_9' "
            f"asked for approval in this run or its sub-agent (waiting: {CANCEL})"
        )
        code, out, err = await cli(address, "approve-call", run.id, CANCEL)
        assert code == 0, err
        assert out.strip() == f"{run.id}: {CANCEL} (cancel_order) approved"

        await waiting_in_sub_agent(run, REFUND)
        code, out, err = await cli(
            address, "deny-call", run.id, REFUND, "--reason", "no refunds today", "--json"
        )
        assert code == 0, err
        decided = json.loads(out)["call"]
        assert (decided["call_id"], decided["status"], decided["reason"]) == (
            REFUND,
            "denied",
            "no refunds today",
        )

        out_bytes, err_bytes = await asyncio.wait_for(following.communicate(), 60)
        followed = err_bytes.decode()
        assert following.returncode == 0, followed
        assert out_bytes.decode() == "The sub-agent cancelled it; no refund.\n"
        assert (
            f"tool call {CANCEL} of {run.id} waits for approval (sub-agent {run.id}/call_1_1): "
            "cancel_order"
        ) in followed
        assert (
            f"decide with: starter.py approve-call {run.id} {CANCEL} --address {address} "
            f"[--remember], or starter.py deny-call {run.id} {CANCEL} --address {address} "
            "--reason TEXT"
        ) in followed.splitlines()
    assert demo_tools.get_order(104999)["status"] == "cancelled"


async def test_remember_through_the_parent_holds_for_the_sub_agent_and_the_parent(
    client: Client, task_queue: str
) -> None:
    """'Always' on a sub-agent's call, decided through the parent: neither the sub-agent's
    later calls of that tool nor the parent's own ask again."""
    email = {"to": "a@b.com", "subject": "Your order", "body": "It is on its way."}
    child = child_model(
        turn(call("send_email", **email)),
        turn(call("send_email", **email)),
        turn(text="Sent twice."),
    )
    script = [
        turn(call("delegate", task="Email a@b.com twice.")),
        turn(call("send_email", **email)),
        turn(text="Three emails sent."),
    ]
    agent_input = scripted_input(
        script,
        tools=["send_email"],
        sub_agents=True,
        sub_agent_model=child,
        tool_approval=ToolApprovalPolicy(),
    )
    async with serving(client, task_queue) as agents:
        run = await agents.start(agent_input)
        await waiting_in_sub_agent(run, "call_1_1/call_1_1")
        decided = await run.decide_tool_call("call_1_1/call_1_1", approve=True, remember=True)
        assert decided.status == "approved"

        result = await run.result()
        events = await until(run, "completed")
    assert result.answer == "Three emails sent."
    assert [e.call_id for e in events if e.kind == "approval_requested"] == ["call_1_1/call_1_1"]
    assert len(demo_tools.outbox()) == 3


async def test_a_cancel_while_the_sub_agent_waits_ends_both_and_clears_the_wait(
    client: Client, task_queue: str
) -> None:
    """The stop button works while a person is being asked on the sub-agent's behalf: both
    runs end CANCELED, nothing ran, and the parent no longer shows the call."""
    async with serving(client, task_queue) as agents:
        run = await agents.start(delegating_input())
        await waiting_in_sub_agent(run, CANCEL)
        await run.handle.cancel()
        with pytest.raises(AgentRunFailed):
            await run.result()
        assert (await run.handle.describe()).status == WorkflowExecutionStatus.CANCELED
        child = agents.run(f"{run.id}/call_1_1")
        assert (await child.handle.describe()).status == WorkflowExecutionStatus.CANCELED
        final = await run.status()
        events = await until(run, "failed")
    assert final.sub_agent_approvals == [] and final.approvals == []
    decided = [(e.call_id, e.outcome) for e in events if e.kind == "approval_decided"]
    assert decided == [(CANCEL, "not_run")]
    assert demo_tools.get_order(104999)["status"] == "processing"


async def test_a_remembered_denial_holds_for_sub_agents_started_later(
    client: Client, task_queue: str
) -> None:
    """'Never' on the parent's own call: a sub-agent started after it is denied the tool with
    the person's reason, and nobody is asked again (issue 38; docs/people-in-the-loop.md)."""
    email = {"to": "a@b.com", "subject": "Your order", "body": "It is on its way."}
    child = child_model(
        turn(call("send_email", **email)),
        turn(text="I could not email: not to customers.", expect="not to customers"),
    )
    script = [
        turn(call("send_email", **email)),
        turn(call("delegate", task="Email a@b.com."), expect="not to customers"),
        turn(text="No email went out.", expect="I could not email"),
    ]
    agent_input = scripted_input(
        script,
        tools=["send_email"],
        sub_agents=True,
        sub_agent_model=child,
        tool_approval=ToolApprovalPolicy(),
    )
    async with serving(client, task_queue) as agents:
        run = await agents.start(agent_input)
        await until(run, "approval_requested")
        await run.decide_tool_call(
            "call_1_1", approve=False, reason="not to customers", remember=True
        )
        result = await run.result()
        events = await until(run, "completed")
        sub_agent = await agents.run(f"{run.id}/call_2_1").result()

    assert result.answer == "No email went out."
    assert [e.call_id for e in events if e.kind == "approval_requested"] == ["call_1_1"]
    denied = sub_agent.step_records[0].tool_calls[0]
    assert denied.outcome == "denied" and "not to customers" in (denied.error or "")
    assert demo_tools.outbox() == []


async def test_a_run_terminated_while_its_sub_agent_waits_leaves_no_stray_error(
    client: Client, task_queue: str
) -> None:
    """The worker drops the terminated run from its cache: the delegate call's cleanup must not
    run outside the workflow (it printed `Exception ignored ... _NotInWorkflowEventLoopError`,
    which this suite's warnings-as-errors turns into a failure)."""
    async with serving(client, task_queue) as agents:
        run = await agents.start(delegating_input())
        await waiting_in_sub_agent(run, CANCEL)
        await run.handle.terminate("stop")
        child = agents.run(f"{run.id}/call_1_1")

        async def ended() -> bool:
            return (await child.handle.describe()).status != WorkflowExecutionStatus.RUNNING

        await eventually(ended, what="the sub-agent to end with its parent")
        # A fresh run on the same worker goes on: the dropped run left nothing behind.
        fresh = await agents.start(scripted_input([turn(text="fine")]))
        assert (await fresh.result()).answer == "fine"
    gc.collect()


async def test_a_call_id_the_model_chose_cannot_stand_for_a_sub_agents_call(
    client: Client, task_queue: str
) -> None:
    """The model names its own call `call_1_1/call_1_1`, the id its parent shows for the
    sub-agent's first call (issue 47). A person who decides the sub-agent's card by that id
    decides the sub-agent's call; the run's own call is decided by the id the run shows for it,
    which has no '/', and not the sub-agent's."""
    email = {"to": "a@b.com", "subject": "Cancelled", "body": "Order 104999 is cancelled."}
    child = child_model(
        turn(call("cancel_order", order_id=104999, reason="asked")),
        turn(text="Cancelled 104999.", expect='"cancelled": true'),
    )
    script = [
        turn(call("delegate", task="Cancel 104999."), call("send_email", id=CANCEL, **email)),
        turn(text="Cancelled; no email.", expect="a person denied this call to send_email"),
    ]
    agent_input = scripted_input(
        script,
        tools=["cancel_order", "send_email"],
        sub_agents=True,
        sub_agent_model=child,
        tool_approval=ToolApprovalPolicy(),
    )
    async with serving(client, task_queue) as agents:
        run = await agents.start(agent_input)
        status = await waiting_in_sub_agent(run, CANCEL)
        [own] = status.approvals  # asked before anything of the reply ran
        assert own.tool == "send_email"

        decided = await run.decide_tool_call(CANCEL, approve=True)
        assert (decided.call_id, decided.tool) == (CANCEL, "cancel_order")
        assert [a.call_id for a in (await run.status()).approvals] == [own.call_id]

        assert "/" not in own.call_id
        decided = await run.decide_tool_call(own.call_id, approve=False, reason="no email")
        assert (decided.call_id, decided.tool, decided.status) == (
            own.call_id,
            "send_email",
            "denied",
        )
        result = await run.result()
        transcript = await run.transcript()
    assert result.answer == "Cancelled; no email."
    assert not any("/" in c.id for m in transcript for c in getattr(m, "tool_calls", ()))
    assert demo_tools.get_order(104999)["status"] == "cancelled"
    assert demo_tools.outbox() == []
