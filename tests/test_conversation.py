"""Conversations on the dev server: turns, steering, interrupts, the end and the idle timeout,
continue-as-new between and within turns (workflows/conversation.py, interruption.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowUpdateFailedError

import tests.tools_for_tests as test_tools
from durable_agent.client.agent_client import AgentClient, AgentRun, AgentRunFailed
from durable_agent.serving.dev_server import temporal_binary
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.inputs import AgentInput, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, ScriptedTurn
from durable_agent.workflows.transcript import Transcript
from durable_agent.workflows.usage import Usage
from tests import fake_openai
from tests.helpers import (
    FAST_MODEL_RETRY,
    TEST_WORKER_OPTIONS,
    call,
    eventually,
    scripted_input,
    turn,
)


def conversation(script: list[ScriptedTurn], **options: Any) -> AgentInput:
    options.setdefault("prompt", "first question")
    return scripted_input(script, conversation=True, **options)


async def start(client: Client, task_queue: str, agent_input: AgentInput) -> AgentRun:
    return await AgentClient(client, task_queue).start(
        agent_input, workflow_id=f"talk-{uuid.uuid4()}"
    )


async def turn_working(run: AgentRun, number: int, *, model_call: bool = False) -> None:
    """Turn `number` works (and, with `model_call`, waits for the model)."""

    async def working() -> bool:
        status = await run.status()
        talk = status.conversation
        waiting_for_model = "waiting for" in status.details
        return (
            talk is not None
            and talk.turn == number
            and talk.working
            and (waiting_for_model or not model_call)
        )

    await eventually(working, what=f"turn {number} working")


async def assert_valid(run: AgentRun) -> None:
    assert Transcript(messages=await run.transcript()).is_complete()


async def test_three_turns_each_with_its_own_step_limit(client: Client, task_queue: str) -> None:
    key = f"talk-{uuid.uuid4()}"
    script = [
        turn(call("count_me", key=key)),
        turn(text="one", expect="1 times"),
        turn(text="two", expect="second question"),
        turn(call("count_me", key=key), expect="third question"),
        turn(text="three", expect="2 times"),
    ]
    agent_input = conversation(script, tools=["count_me"], limits=Limits(max_steps=2))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        first = await run.turn(1)
        assert (first.answer, first.outcome, first.steps) == ("one", "answered", 2)

        second = await run.send("second question")
        assert (second.turn, second.answer, second.steps) == (2, "two", 1)
        await run.handle.signal("send_message", "third question")  # as the Web UI sends it
        third = await run.turn(3)
        assert (third.answer, third.steps) == ("three", 2)

        for refused, says in (("  ", "empty"),):
            with pytest.raises(WorkflowUpdateFailedError) as failure:
                await run.post(refused)
            assert says in str(failure.value.cause)
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await run.interrupt()
        assert "no turn is working" in str(failure.value.cause)
        status = await run.status()
        assert status.conversation is not None and not status.conversation.working
        assert "waiting for the next message" in status.details
        await assert_valid(run)

        result = await run.end()
    assert result.ended == "ended by the user"
    assert [(t.turn, t.answer, t.outcome) for t in result.turns] == [
        (1, "one", "answered"),
        (2, "two", "answered"),
        (3, "three", "answered"),
    ]
    assert result.answer == "three" and result.steps == 5
    assert sum(t.usage.total_tokens for t in result.turns) == result.usage.total_tokens
    assert [r.turn for r in result.step_records] == [1, 1, 2, 3, 3]


async def test_a_message_to_a_run_that_is_not_a_conversation_is_refused(
    client: Client, task_queue: str
) -> None:
    agent_input = scripted_input([turn(call("block", seconds=30)), turn(text="done")])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await run.post("hello")
        assert "not a conversation" in str(failure.value.cause)
        await run.handle.terminate()


async def test_a_turn_that_reaches_its_step_limit_ends_and_the_conversation_goes_on(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(call("count_me", key=f"limit-{uuid.uuid4()}")),
        turn(text="after the limit", expect="go on"),
    ]
    agent_input = conversation(script, tools=["count_me"], limits=Limits(max_steps=1))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        first = await run.turn(1)
        assert (first.outcome, first.answer, first.steps) == ("step_limit", None, 1)
        second = await run.send("go on")
        assert second.answer == "after the limit"
        await run.end()


async def test_the_idle_timeout_ends_the_conversation(client: Client, task_queue: str) -> None:
    agent_input = conversation([turn(text="hello")], idle_timeout_seconds=1)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        result = await run.result()
    assert result.ended == "idle for 1 s (idle_timeout_seconds)"
    assert [t.answer for t in result.turns] == ["hello"]


async def test_a_conversation_continues_as_new_between_turns_and_within_one(
    client: Client, task_queue: str
) -> None:
    key = f"can-{uuid.uuid4()}"
    script = [
        turn(call("count_me", key=key)),
        turn(text="one"),  # run 1 ends here, between turns
        turn(call("count_me", key=key), expect="again"),
        turn(call("count_me", key=key)),  # run 2 ends within turn 2
        turn(text="two", expect="3 times"),
    ]
    agent_input = conversation(script, tools=["count_me"], continue_as_new_after_steps=2)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        assert (await run.turn(1)).answer == "one"
        await eventually(lambda: _runs(run, 2), what="the conversation handed on while it waited")
        second = await run.send("again")
        assert (second.answer, second.steps) == ("two", 3)
        await assert_valid(run)
        result = await run.end()
    assert [t.answer for t in result.turns] == ["one", "two"]
    assert await _runs(run, 3)


async def _runs(run: AgentRun, at_least: int) -> bool:
    description = await run.handle.describe()
    return description.run_id != run.handle.first_execution_run_id and (
        at_least <= 2 or (await _chain_length(run)) >= at_least
    )


async def _chain_length(run: AgentRun) -> int:
    count = 0
    async for _ in run.client.list_workflows(f"WorkflowId='{run.id}'"):
        count += 1
    return count


def on_openai(**options: Any) -> AgentInput:
    return AgentInput(
        prompt=options.pop("prompt", "first question"),
        model=ModelSettings(provider="openai", model="gpt-fake-mini", retry=FAST_MODEL_RETRY),
        conversation=True,
        tool_approval=ToolApprovalPolicy(approve_all=True),
        **options,
    )


def every_request_accepted(fake: fake_openai.FakeOpenAI) -> None:
    for number, request in enumerate(fake.requests, start=1):
        assert fake_openai.pairing_error(request.body["messages"]) is None, number


async def test_a_message_during_a_model_call_lands_after_the_replys_results(
    client: Client, task_queue: str, openai: fake_openai.FakeOpenAI
) -> None:
    """The model is slow; a message sent meanwhile waits for the reply's calls, then goes in
    before the next model call, which sees it; the provider accepts every request."""
    key = f"steer-{uuid.uuid4()}"
    openai.script = [
        fake_openai.Slow(
            2.0,
            fake_openai.Reply(
                tool_calls=[
                    ("call_a", "count_me", json.dumps({"key": key})),
                    ("call_b", "count_me", json.dumps({"key": key + "-b"})),
                ]
            ),
        ),
        fake_openai.Reply("Refunded instead."),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, on_openai(tools=["count_me"]))
        await turn_working(run, 1, model_call=True)
        assert await run.post("refund instead") == 1
        status = await run.status()
        assert status.conversation is not None
        assert [m.text for m in status.conversation.queued] == ["refund instead"]
        first = await run.turn(1)
        assert (first.answer, first.steering, first.steps) == ("Refunded instead.", 1, 2)
        kinds = [e.kind async for e in run.turn_events(1)]
        await run.end()
    every_request_accepted(openai)
    second = openai.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool", "user"][
        -len(second) :
    ]
    assert second[-1]["content"] == "refund instead"
    assert kinds.index("message_queued") < kinds.index("tool_call_finished")
    assert kinds.index("tool_call_finished") < kinds.index("message_delivered")
    assert kinds.index("message_delivered") < len(kinds) - kinds[::-1].index("step_started") - 1


async def test_an_interrupt_cancels_the_model_call_in_flight(
    client: Client, task_queue: str, openai: fake_openai.FakeOpenAI
) -> None:
    openai.script = [
        # Long enough that on a busy machine the interrupt lands while it is in flight.
        fake_openai.Slow(60.0, fake_openai.Reply("never read")),
        fake_openai.Reply("After the interrupt."),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, on_openai(tools=[]))
        await turn_working(run, 1, model_call=True)
        assert await run.interrupt() == 1
        first = await run.turn(1)
        assert (first.outcome, first.steps, first.answer) == ("interrupted", 0, None)
        second = await run.send("start over")
        assert second.answer == "After the interrupt."
        await assert_valid(run)
        await run.end()
    every_request_accepted(openai)
    assert [m["content"] for m in openai.requests[1].body["messages"] if m["role"] == "user"] == [
        "first question",
        "start over",
    ]


async def test_an_interrupt_cancels_read_only_calls_and_skips_those_not_started(
    client: Client, task_queue: str
) -> None:
    script = [
        turn(
            call("block", seconds=30),
            call("block", seconds=31),
            call("keyed_effect", label=f"never-{uuid.uuid4()}"),
        ),
        turn(text="stopped", expect="interrupted by the user"),
    ]
    agent_input = conversation(script, tools=["block", "keyed_effect"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)

        async def blocked() -> bool:
            return await _started_activities(run, "block") == 2

        await eventually(blocked, what="the block calls started")
        await run.interrupt()
        first = await run.turn(1)
        assert first.outcome == "interrupted"
        results = [m for m in await run.transcript() if m.role == "tool"]
        assert [r.content for r in results] == [
            "Error: block was cancelled: the user interrupted the turn while it ran.",
            "Error: block was cancelled: the user interrupted the turn while it ran.",
            "Not run: interrupted by the user.",
        ]
        assert (await run.send("what happened?")).answer == "stopped"
        result = await run.end()
    assert result.side_effects == []


async def test_an_interrupt_lets_a_call_that_changes_data_finish_and_undoes_nothing(
    client: Client, task_queue: str
) -> None:
    label = f"slow-{uuid.uuid4()}"
    test_tools.slow_effect_started.clear()
    script = [
        turn(call("slow_effect", label=label, seconds=1.0), call("count_me", key=label)),
        turn(text="kept", expect="go on"),
    ]
    agent_input = conversation(script, tools=["slow_effect", "count_me"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        await eventually(test_tools.slow_effect_started.is_set, what="slow_effect started")
        await run.interrupt()
        first = await run.turn(1)
        assert first.outcome == "interrupted"
        results = [m for m in await run.transcript() if m.role == "tool"]
        assert [r.is_error for r in results] == [False, True]
        assert results[1].content == "Not run: interrupted by the user."
        assert label in test_tools.applied.values()
        # An answered turn after it keeps its effect when the conversation ends.
        assert (await run.send("go on")).answer == "kept"
        result = await run.end()
    assert [e.call.tool for e in result.side_effects] == ["slow_effect"]
    assert label in test_tools.applied.values()


async def test_ending_after_an_interrupted_turn_undoes_its_effects(
    client: Client, task_queue: str
) -> None:
    label = f"undo-{uuid.uuid4()}"
    test_tools.slow_effect_started.clear()
    script = [turn(call("slow_effect", label=label, seconds=1.0)), turn(text="never")]
    agent_input = conversation(script, tools=["slow_effect"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        await eventually(test_tools.slow_effect_started.is_set, what="slow_effect started")
        await run.interrupt()
        assert (await run.turn(1)).outcome == "interrupted"
        assert label in test_tools.applied.values()
        result = await run.end()
    assert label not in test_tools.applied.values()
    assert result.side_effects == []


async def test_tool_approval_inside_a_conversation(client: Client, task_queue: str) -> None:
    label = f"approve-{uuid.uuid4()}"
    script = [turn(text="hi"), turn(call("keyed_effect", label=label)), turn(text="done")]
    agent_input = conversation(script, tools=["keyed_effect"], tool_approval=ToolApprovalPolicy())
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        await run.turn(1)
        assert await run.post("do it") == 2

        async def asked() -> bool:
            return bool(await run.pending_tool_calls())

        await eventually(asked, what="the call waits for approval")
        (waiting,) = await run.pending_tool_calls()
        await run.decide_tool_call(waiting.call_id, approve=True)
        assert (await run.turn(2)).answer == "done"
        await run.end()
    assert any(label == seen[0] for seen in test_tools.keys_seen)


async def _started_activities(run: AgentRun, name: str) -> int:
    """Activities of `name` that a worker has started and that have not finished."""
    description = await run.handle.describe()
    pending = description.raw_description.pending_activities
    return sum(
        1
        for activity in pending
        if activity.activity_type.name == name
        and activity.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    )


def temporal_cli(client: Client, *args: str) -> subprocess.CompletedProcess[str]:
    address = client.service_client.config.target_host
    return subprocess.run(
        [temporal_binary(), "workflow", *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_the_temporal_cli_sends_interrupts_and_ends(client: Client, task_queue: str) -> None:
    script = [
        turn(text="one"),
        turn(call("block", seconds=30)),
        turn(text="three", expect="by signal"),
    ]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, conversation(script, tools=["block"]))
        await run.turn(1)
        sent = await asyncio.to_thread(
            temporal_cli,
            client,
            "update",
            "execute",
            "--workflow-id",
            run.id,
            "--name",
            "send_message",
            "--input",
            '"by update"',
        )
        assert sent.returncode == 0, sent.stderr
        assert "2" in sent.stdout
        await turn_working(run, 2, model_call=True)
        stopped = await asyncio.to_thread(
            temporal_cli,
            client,
            "update",
            "execute",
            "--workflow-id",
            run.id,
            "--name",
            "interrupt",
        )
        assert stopped.returncode == 0, stopped.stderr
        assert (await run.turn(2)).outcome == "interrupted"
        refused = await asyncio.to_thread(
            temporal_cli,
            client,
            "update",
            "execute",
            "--workflow-id",
            run.id,
            "--name",
            "send_message",
            "--input",
            '""',
        )
        assert refused.returncode != 0 and "the message is empty" in refused.stderr + refused.stdout
        signalled = await asyncio.to_thread(
            temporal_cli,
            client,
            "signal",
            "--workflow-id",
            run.id,
            "--name",
            "send_message",
            "--input",
            '"by signal"',
        )
        assert signalled.returncode == 0, signalled.stderr
        assert (await run.turn(3)).answer == "three"
        ended = await asyncio.to_thread(
            temporal_cli, client, "signal", "--workflow-id", run.id, "--name", "end_conversation"
        )
        assert ended.returncode == 0, ended.stderr
        result = await run.result()
    assert [t.outcome for t in result.turns] == ["answered", "interrupted", "answered"]


async def test_plan_approval_inside_a_conversation(client: Client, task_queue: str) -> None:
    label = f"plan-{uuid.uuid4()}"
    script = [
        turn(text="hello"),
        turn(call("submit_plan", steps=["Apply the effect"]), expect="change it"),
        turn(call("keyed_effect", label=label), expect="approved plan v1"),
        turn(text="changed"),
    ]
    agent_input = conversation(script, tools=["keyed_effect"], plan=True)
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        assert (await run.turn(1)).answer == "hello"
        assert await run.post("change it") == 2

        async def plan_waits() -> bool:
            plan = (await run.status()).plan
            return plan is not None and plan.status == "awaiting_approval"

        await eventually(plan_waits, what="the plan waits")
        with pytest.raises(WorkflowUpdateFailedError) as failure:
            await run.interrupt()
        assert "approve or reject it" in str(failure.value.cause)
        await run.approve_plan()
        assert (await run.turn(2)).answer == "changed"
        await run.end()
    assert any(label == seen[0] for seen in test_tools.keys_seen)


async def test_cancelling_a_conversation_undoes_every_turns_effects(
    client: Client, task_queue: str
) -> None:
    label = f"cancel-{uuid.uuid4()}"
    script = [turn(call("keyed_effect", label=label)), turn(text="done")]
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, conversation(script, tools=["keyed_effect"]))
        assert (await run.turn(1)).answer == "done"
        await run.handle.cancel()
        with pytest.raises(AgentRunFailed) as failure:
            await run.result()
    assert failure.value.type == "CancelledError"
    assert label in test_tools.undone


async def test_the_conversations_budget_spans_its_turns(client: Client, task_queue: str) -> None:
    spent = Usage(input_tokens=60, output_tokens=0)
    script = [turn(text="one", usage=spent), turn(text="two", usage=spent)]
    agent_input = conversation(script, limits=Limits(max_total_tokens=100))
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        assert (await run.turn(1)).answer == "one"
        await run.post("again")
        with pytest.raises(AgentRunFailed) as failure:
            await run.result()
    assert failure.value.type == "AgentBudgetExceeded"
    assert "max_total_tokens=100" in failure.value.message


async def test_a_failed_later_turn_keeps_the_answered_turns_effects(
    client: Client, task_queue: str
) -> None:
    """Turn 1 applies an effect and answers; turn 2 applies one and hits a fatal tool error.
    Only turn 2's is undone, and the failure says which effect was kept and why."""
    first, second = f"kept-{uuid.uuid4()}", f"undone-{uuid.uuid4()}"
    script = [
        turn(call("keyed_effect", label=first)),
        turn(text="refunded"),
        turn(call("keyed_effect", label=second), expect="second question"),
        turn(call("bad_credential")),
        turn(text="never"),
    ]
    agent_input = conversation(script, tools=["keyed_effect", "bad_credential"])
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        run = await start(client, task_queue, agent_input)
        assert (await run.turn(1)).answer == "refunded"
        await run.post("second question")
        with pytest.raises(AgentRunFailed) as failure:
            await run.result()
    assert failure.value.type == "AgentFatalToolError"
    assert second in test_tools.undone and first not in test_tools.undone
    message = failure.value.message
    assert "keyed_effect call_3_1 undone by undo_keyed_effect" in message
    assert "Side effects kept, as answered turns' effects stay" in message
    assert "keyed_effect call_1_1" in message.split("Side effects kept")[1]
