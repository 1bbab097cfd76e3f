"""Model calls name what earlier calls sent: the history grows linearly, and a store miss only
costs one full resend."""

from __future__ import annotations

import json
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agent.activities import message_store
from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.transcript import Transcript
from tests.helpers import call, run_agent, scripted_input, turn

STEPS = 16


def long_input(**options: object) -> AgentInput:
    script = [turn(call("blob", size=2000 + i)) for i in range(STEPS - 1)]
    return scripted_input([*script, turn(text="done")], tools=["blob"], **options)


async def model_inputs(handle: WorkflowHandle) -> list[dict]:
    """The inputs of every scheduled model activity, as recorded in the event history."""
    history = await handle.fetch_history()
    return [
        json.loads(event.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]


def history_bytes(inputs: list[dict]) -> int:
    return sum(len(json.dumps(i)) for i in inputs)


@pytest.mark.usefixtures("scripted_requests")
async def test_model_calls_carry_only_what_is_new(client: Client, task_queue: str) -> None:
    linear = await run_agent(client, task_queue, long_input())
    full = await run_agent(client, task_queue, long_input(linear_history=False))

    assert linear.result is not None and full.result is not None
    assert linear.result.answer == full.result.answer == "done"
    linear_inputs, full_inputs = await model_inputs(linear.handle), await model_inputs(full.handle)
    # After the first call, each carries the new assistant message and its result, by reference
    # to everything before, and the tool list by reference.
    assert [len(i["messages"]) for i in linear_inputs[1:]] == [2] * (STEPS - 1)
    assert all(i["prefix_ref"] and i["tools_ref"] and not i["tools"] for i in linear_inputs[1:])
    # The tool result is in the history already (the tool's own result): it goes by reference.
    assert all(
        i["content_refs"] == {"1": i["content_refs"]["1"]} and i["messages"][1]["content"] == ""
        for i in linear_inputs[1:]
    )
    assert [len(i["messages"]) for i in full_inputs] == [1 + 2 * k for k in range(STEPS)]
    distinct = sum(len(json.dumps(m.model_dump(mode="json"))) for m in linear.transcript)
    assert history_bytes(linear_inputs) < 3 * distinct < history_bytes(full_inputs)
    # The model still saw the whole, valid transcript every time.
    for request in recorded_requests(linear.handle.id):
        Transcript(messages=request.messages)
    assert len(recorded_requests(linear.handle.id)[-1].messages) == 1 + 2 * (STEPS - 1)


@pytest.mark.usefixtures("scripted_requests")
async def test_a_reply_is_in_the_history_once(client: Client, task_queue: str) -> None:
    """A model reply's text is the model activity's result; the next call names it by hash
    rather than carrying it again, and the model still receives it whole."""
    replies = [f"Reading part {i}. " + "r" * 2000 for i in range(4)]
    script = [turn(call("blob", size=300 + i), text=text) for i, text in enumerate(replies)]
    run = await run_agent(
        client, task_queue, scripted_input([*script, turn(text="done")], tools=["blob"])
    )
    assert run.result is not None, run.error
    inputs = await model_inputs(run.handle)
    for step, sent in enumerate(inputs[1:]):
        # The new messages: the previous reply (by reference) and its tool result.
        assert sent["messages"][0]["role"] == "assistant"
        assert sent["messages"][0]["content"] == ""
        assert "0" in sent["content_refs"], sent["content_refs"]
        assert replies[step] not in json.dumps(sent)
    received = recorded_requests(run.handle.id)[-1].messages
    assert [m.content for m in received if m.role == "assistant"] == replies


class ForgetfulStore(message_store.SqliteMessageStore):
    """Keeps nothing it is asked to resolve: every reference misses."""

    def get_chain(self, ref: str) -> list[str] | None:
        return None


class ForgetsOnce(message_store.SqliteMessageStore):
    """Misses the third chain it is asked for, as a worker that lost its file would."""

    asked = 0

    def get_chain(self, ref: str) -> list[str] | None:
        self.asked += 1
        return None if self.asked == 3 else super().get_chain(ref)


def misses(history: Any) -> list[Any]:
    return [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
        and e.activity_task_failed_event_attributes.failure.application_failure_info.type
        == "MessageStoreMiss"
    ]


async def test_a_store_miss_resends_the_whole_request(
    client: Client, task_queue: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nor does this process keep what the whole requests sent, which a next call would name.
    monkeypatch.setattr(message_store, "UNWRITTEN_CHARS", 0)
    message_store.use_message_store(ForgetfulStore(f"{tmp_path}/forgetful.db"))
    try:
        run = await run_agent(client, task_queue, long_input())
    finally:
        message_store.use_message_store(None)

    assert run.result is not None and run.result.steps == STEPS
    inputs = await model_inputs(run.handle)
    # Every step after the first tried by reference, missed once, and went again whole.
    assert len(inputs) == 1 + 2 * (STEPS - 1)
    assert [bool(i["prefix_ref"]) for i in inputs[1:3]] == [True, False]
    assert len(misses(await run.handle.fetch_history())) == STEPS - 1


async def test_after_a_miss_the_next_call_names_the_request_sent_whole(
    client: Client, task_queue: str, tmp_path: object
) -> None:
    message_store.use_message_store(ForgetsOnce(f"{tmp_path}/once.db"))
    try:
        run = await run_agent(client, task_queue, long_input())
    finally:
        message_store.use_message_store(None)

    assert run.result is not None and run.result.steps == STEPS
    inputs = await model_inputs(run.handle)
    assert len(inputs) == STEPS + 1, "one miss, one whole resend, and by reference again"
    assert len(misses(await run.handle.fetch_history())) == 1
    resent = next(n for n, i in enumerate(inputs[1:], 1) if i["prefix_ref"] is None)
    # The resend named nothing, so the worker kept it in memory until the next call named it.
    assert inputs[resent + 1]["prefix_ref"] and inputs[resent + 1]["prefix_count"] == len(
        inputs[resent]["messages"]
    )


@pytest.mark.usefixtures("scripted_requests")
async def test_after_a_compaction_the_view_goes_whole_but_its_results_by_hash(
    client: Client, task_queue: str
) -> None:
    agent_input = long_input(limits=Limits(max_context_tokens=3000), compaction="window")
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None and run.result.compactions
    inputs = await model_inputs(run.handle)
    rewritten = [i for i in inputs[1:] if i["prefix_ref"] is None]
    assert len(rewritten) == len(run.result.compactions)
    # The view starts again from the task and the note, and its tool results go by reference.
    assert all(i["messages"][1]["content"].startswith("[") for i in rewritten)
    assert all(i["content_refs"] for i in rewritten)
    for request in recorded_requests(run.handle.id):
        Transcript(messages=request.messages)
