"""What a person or an app sends a run is bounded (workflows/input_limits.py): a message, the
messages that wait for a turn to take them, a plan's comment, a denial's reason. An update over
a bound is refused by its validator, so nothing is written to the history; a signal over one is
ignored, and the run's page says why."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

import durable_agent.workflows.versioning as versioning
import tests.tools_for_tests as test_tools
from durable_agent.cli import starter
from durable_agent.client.agent_client import AgentClient, AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.input_limits import (
    MAX_MESSAGE_CHARS,
    MAX_QUEUED_MESSAGE_BYTES,
    MAX_REASON_CHARS,
    TOO_LARGE,
)
from durable_agent.workflows.inputs import AgentInput, ToolApprovalPolicy
from durable_agent.workflows.transcript import Transcript
from tests.helpers import TEST_WORKER_OPTIONS, call, eventually, scripted_input, turn
from tests.test_conversation_cli import PROMPT, start_chat

EURO = "\u20ac"
"""Three bytes in UTF-8: the queue's bound is in bytes, the per-message one in characters."""


async def start(client: Client, task_queue: str, agent_input: AgentInput) -> AgentRun:
    return await AgentClient(client, task_queue).start(
        agent_input, workflow_id=f"limits-{uuid.uuid4()}"
    )


async def too_large(update: Any) -> ApplicationError:
    """The refusal of an update over a bound: its cause, checked to be the documented kind."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await update
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError), cause
    assert cause.type == TOO_LARGE and cause.non_retryable, cause
    assert "\n" not in cause.message
    return cause


async def history_bytes(run: AgentRun) -> list[bytes]:
    return [event.SerializeToString() async for event in run.handle.fetch_history_events()]


async def accepted_updates(run: AgentRun) -> int:
    events = [event async for event in run.handle.fetch_history_events()]
    return sum(e.HasField("workflow_execution_update_accepted_event_attributes") for e in events)


async def test_a_flood_of_messages_is_refused_at_the_queue_bound_and_the_turn_keeps_its_effects(
    client: Client, task_queue: str
) -> None:
    label, key = f"kept-{uuid.uuid4()}", f"hold-{uuid.uuid4()}"
    # 20,000 characters each (under the per-message bound), 60,000 bytes: the fifth would take
    # the waiting messages over the queue's 256,000 bytes.
    flood = [f"flood {i} " + EURO * 20_000 for i in range(7)]
    fits = MAX_QUEUED_MESSAGE_BYTES // len(flood[0].encode())
    assert fits == 4
    script = [
        turn(call("keyed_effect", label=label)),
        turn(call("hold", key=key)),
        turn(text="read them all", expect=f"flood {fits - 1} "),
        turn(text="and this one", expect="after the flood"),
    ]
    agent_input = scripted_input(
        script, prompt="first", conversation=True, tools=["keyed_effect", "hold"]
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        await eventually(lambda: key in test_tools.holding, what="the turn holds")
        before = await accepted_updates(run)
        refusals: list[ApplicationError] = []
        for text in flood:
            try:
                assert await run.post(text) == 1
            except WorkflowUpdateFailedError:
                refusals.append(await too_large(run.post(text)))
        assert len(refusals) == len(flood) - fits
        assert refusals[0].message == (
            f"{fits} messages wait for turn 1 to take them, {fits * 60_008:,} bytes; this one "
            f"(60,008 bytes) would take them over {MAX_QUEUED_MESSAGE_BYTES:,} bytes "
            "(MAX_QUEUED_MESSAGE_BYTES): send it once the turn has taken them, at its next "
            "model call"
        )
        # Refused means not written: only the accepted messages are in the history.
        assert await accepted_updates(run) == before + fits
        history = b"".join(await history_bytes(run))
        assert f"flood {fits} ".encode() not in history
        status = await run.status()
        assert status.conversation is not None
        assert [m.text[:8] for m in status.conversation.queued] == [
            f"flood {i} " for i in range(fits)
        ]

        test_tools.released.add(key)
        first = await run.turn(1)
        assert (first.outcome, first.answer, first.steering) == ("answered", "read them all", fits)
        # The turn took them: the queue has room again.
        second = await run.send("after the flood")
        assert second.answer == "and this one"
        assert Transcript(messages=await run.transcript()).is_complete()
        result = await run.end()
        history = b"".join(await history_bytes(run))
    assert [e.call.arguments["label"] for e in result.side_effects] == [label]
    assert label not in test_tools.undone
    # Only a signal over a bound asks for the bounds' patch: this run has no marker of it.
    assert versioning.SIGNAL_INPUT_BOUNDS.encode() not in history


async def test_a_message_over_its_bound_is_refused_by_update_and_ignored_by_signal(
    client: Client, task_queue: str
) -> None:
    script = [turn(text="one"), turn(text="two", expect="second")]
    agent_input = scripted_input(script, prompt="first", conversation=True)
    oversize = "x" * MAX_MESSAGE_CHARS + "!"
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        await run.turn(1)
        before = await accepted_updates(run)
        refused = await too_large(run.handle.execute_update(AgentWorkflow.send_message, oversize))
        assert refused.message == (
            f"the message is {MAX_MESSAGE_CHARS + 1:,} characters; a message may have "
            f"{MAX_MESSAGE_CHARS:,} (MAX_MESSAGE_CHARS): shorten it, or send it in parts"
        )
        # The client refuses it too, the same way, without sending it.
        assert (await too_large(run.post(oversize))).message == refused.message
        assert await accepted_updates(run) == before
        assert not any(oversize.encode() in event for event in await history_bytes(run))

        # A signal cannot be refused: it is ignored, and the next message starts turn 2.
        await run.handle.signal("send_message", oversize)
        await run.handle.signal("send_message", "second")
        second = await run.turn(2)
        assert (second.message, second.steering, second.answer) == ("second", 0, "two")
        result = await run.end()
        history = await history_bytes(run)
    assert [t.message for t in result.turns] == ["first", "second"]
    # The signal's own event holds it (the server wrote it), and nothing else does; the run
    # recorded the marker of the bounds' patch, asked because of this signal.
    assert sum(oversize.encode() in event for event in history) == 1
    assert any(versioning.SIGNAL_INPUT_BOUNDS.encode() in event for event in history)


async def test_a_plan_comment_over_its_bound_is_refused(client: Client, task_queue: str) -> None:
    script = [
        turn(call("submit_plan", steps=["Look it up"])),
        turn(text="done", expect="approved plan v1"),
    ]
    agent_input = scripted_input(script, tools=["get_order"], plan=True)
    oversize = "y" * (MAX_MESSAGE_CHARS + 1)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)

        async def plan_waits() -> bool:
            return (await run.status()).status == "awaiting_approval"

        await eventually(plan_waits, what="the plan waits")
        rejected = await too_large(run.reject_plan(oversize))
        assert rejected.message == (
            f"the comment is {MAX_MESSAGE_CHARS + 1:,} characters; a comment may have "
            f"{MAX_MESSAGE_CHARS:,} (MAX_MESSAGE_CHARS): shorten it"
        )
        await too_large(run.approve_plan(oversize))
        decision = {"approve": False, "comment": oversize}
        await too_large(run.handle.execute_update("decide_plan", decision))
        # Refused, so undecided: the plan still waits, and a decision in bounds decides it.
        assert (await run.status()).status == "awaiting_approval"
        await run.handle.signal("reject_plan", oversize)  # ignored, and the run says why
        await run.approve_plan("go ahead")
        assert (await run.result()).answer == "done"


async def test_a_denial_reason_over_its_bound_is_refused(client: Client, task_queue: str) -> None:
    label = f"denied-{uuid.uuid4()}"
    script = [turn(call("keyed_effect", label=label)), turn(text="not done", expect="no, because")]
    agent_input = scripted_input(script, tools=["keyed_effect"], tool_approval=ToolApprovalPolicy())
    oversize = "z" * (MAX_REASON_CHARS + 1)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)

        async def call_waits() -> bool:
            return bool((await run.status()).approvals)

        await eventually(call_waits, what="the call waits")
        denied = await too_large(run.decide_tool_call("call_1_1", approve=False, reason=oversize))
        assert denied.message == (
            f"the reason is {MAX_REASON_CHARS + 1:,} characters; a reason may have "
            f"{MAX_REASON_CHARS:,} (MAX_REASON_CHARS): shorten it"
        )
        decision = {"call_id": "call_1_1", "approve": False, "reason": oversize}
        await too_large(run.handle.execute_update("decide_tool_call", decision))
        assert [a.status for a in (await run.status()).approvals] == ["awaiting_approval"]
        # An id longer than any the run gives is quoted back by its start, not whole.
        with pytest.raises(WorkflowUpdateFailedError) as unknown:
            await run.decide_tool_call("c" * 100_000, approve=True)
        cause = unknown.value.cause
        assert isinstance(cause, ApplicationError)
        message = cause.message
        assert message.startswith(f"no tool call {'c' * 100!r}... (100,000 characters) asked")
        assert len(message) < 300
        await run.decide_tool_call("call_1_1", approve=False, reason="no, because")
        assert (await run.result()).answer == "not done"
    assert label not in [k[0] for k in test_tools.keys_seen]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["send", "w", "x" * (MAX_MESSAGE_CHARS + 1)], "the message is 32,001 characters"),
        (["reject", "w", "--feedback", "x" * (MAX_MESSAGE_CHARS + 1)], "--feedback is 32,001"),
        (["approve", "w", "--comment", "x" * (MAX_MESSAGE_CHARS + 1)], "--comment is 32,001"),
        (["deny-call", "w", "c", "--reason", "x" * (MAX_REASON_CHARS + 1)], "--reason is 2,001"),
    ],
)
def test_the_cli_refuses_text_over_its_bound_as_a_bad_command_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert starter.main([*argv, "--address", "localhost:1"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.splitlines()) == 1 and says in err, err


async def test_a_chat_line_over_its_bound_is_refused_and_the_chat_goes_on(tmp_path: Path) -> None:
    process = await start_chat(db=tmp_path / "demo.db")
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(f"{PROMPT}\n".encode())
        await process.stdin.drain()
        first = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        assert "14:20" in first.decode()
        process.stdin.write(b"x" * (MAX_MESSAGE_CHARS + 1) + b"\n")
        process.stdin.write(b"and the one before?\n")
        await process.stdin.drain()
        second = await asyncio.wait_for(process.stdout.readline(), timeout=30)
        assert "scripted demo" in second.decode()
        process.stdin.close()
        _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, err.decode()
    assert "not sent: the message is 32,001 characters" in err.decode()
    assert "ended by the user: 2 turns" in err.decode()
