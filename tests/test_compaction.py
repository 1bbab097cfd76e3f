"""Compaction: the view sent to the model shrinks by whole tool-call groups, never invalid."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client

from durable_agent.activities.providers.scripted import recorded_requests
from durable_agent.workflows import compaction
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.transcript import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    Transcript,
    UserMessage,
)
from tests.helpers import call, run_agent, scripted_input, turn


def synthetic_transcript() -> list[Message]:
    messages: list[Message] = [UserMessage(content="the task")]
    for step in range(1, 6):
        calls = tuple(
            ToolCall(id=f"c{step}_{i}", name="t", arguments='{"n": 1}') for i in range(step % 3)
        )
        messages.append(AssistantMessage(content=f"step {step}", tool_calls=calls))
        messages += [ToolResult(tool_call_id=c.id, tool_name="t", content="x" * 400) for c in calls]
        if step == 3:
            messages.append(UserMessage(content="a person's note"))
    return messages


def test_every_cut_the_compactor_can_choose_keeps_the_groups_whole() -> None:
    messages = synthetic_transcript()
    note = UserMessage(content="[note]")
    starts = compaction.group_starts(messages)
    assert all(not isinstance(messages[i], ToolResult) for i in starts)
    for need in range(0, 2000, 50):
        cut = compaction.choose_cut(messages, 1, need)
        if cut is None:
            continue
        sent = compaction.view(messages, cut, note)
        Transcript(messages=sent)  # valid for a provider
        assert sent[0] == messages[0] and sent[1] == note
        assert cut <= starts[-1]  # the newest group is always kept


def test_a_window_never_starts_inside_a_group() -> None:
    messages = synthetic_transcript()
    result_index = next(i for i, m in enumerate(messages) if isinstance(m, ToolResult))
    try:
        compaction.view(messages, result_index, UserMessage(content="[note]"))
    except ValueError as refused:
        assert "no tool call is waiting" in str(refused)
    else:
        raise AssertionError("a view starting at a tool result must be refused")


def long_run(policy: str) -> AgentInput:
    script = [turn(call("blob", size=1600 + i, id=f"b{i}"), text=f"part {i}") for i in range(8)]
    script.append(turn(text="done reading"))
    return scripted_input(
        script,
        tools=["blob"],
        limits=Limits(max_context_tokens=2000, max_steps=20),
        compaction=policy,
    )


def assert_every_request_was_valid(workflow_id: str) -> None:
    for request in recorded_requests(workflow_id):
        Transcript(messages=request.messages)


@pytest.mark.usefixtures("scripted_requests")
async def test_window_compaction_keeps_a_long_run_within_its_context(
    client: Client, task_queue: str
) -> None:
    run = await run_agent(client, task_queue, long_run("window"))

    assert run.result is not None and run.result.answer == "done reading"
    assert run.result.compactions and {c.policy for c in run.result.compactions} == {"window"}
    first = run.result.compactions[0]
    assert first.tokens_removed > 0 and first.messages_removed >= 2
    assert first.cached_tokens_lost is not None
    assert_every_request_was_valid(run.handle.id)
    last = recorded_requests(run.handle.id)[-1]
    assert last.messages[0].content == "where is order 1042"
    assert last.messages[1].content.endswith("earlier messages dropped to fit the context window]")
    # The full transcript stays whole and retrievable.
    assert len(run.transcript) == 1 + 2 * 8 + 1


@pytest.mark.usefixtures("scripted_requests")
async def test_summary_compaction_leaves_a_visible_summary(client: Client, task_queue: str) -> None:
    run = await run_agent(client, task_queue, long_run("summary"))

    assert run.result is not None and run.result.answer == "done reading"
    requests = recorded_requests(run.handle.id)
    summaries = [r for r in requests if r.purpose == "summary"]
    assert len(summaries) == len(run.result.compactions) >= 1
    assert summaries[0].tools == [] and "RESULT of blob [b0]" in summaries[0].messages[0].content
    note = requests[-1].messages[1].content
    assert "earlier messages summarised]\n(scripted summary)" in note
    assert_every_request_was_valid(run.handle.id)
    # The summaries' tokens are spent too, though they are not steps.
    step_input = sum(r.usage.input_tokens for r in run.result.step_records)
    assert run.result.usage.input_tokens > step_input
    assert run.result.steps == 9


async def test_without_compaction_the_context_limit_fails_the_run(
    client: Client, task_queue: str
) -> None:
    run = await run_agent(client, task_queue, long_run("none"))

    assert run.failure.type == "AgentBudgetExceeded"
    assert "max_context_tokens=2000" in run.failure.message
    assert json.dumps(run.failure.details[0]).count('"step"') >= 2
