"""Anthropic thinking through the real SDK against the fake, which holds the API's rules: the
signed thinking blocks kept in the transcript and sent back unchanged in every normal path, and
the API's 400 when one is dropped or changed on purpose."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.activities.providers import anthropic_provider
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.errors import AgentProviderError
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.transcript import (
    AssistantMessage,
    Message,
    ReasoningPart,
    ToolResult,
    UserMessage,
)
from tests import fake_anthropic
from tests.fake_anthropic import MISSING_THINKING, FakeAnthropic, Reply, request_error, signature
from tests.helpers import FAST_MODEL_RETRY, run_agent

MODEL = "claude-fake-sonnet"
BUDGET = 2048
TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]
SEARCH = ("toolu_search", "search_orders", {"email": "a@b.com"})
CUSTOMER = ("toolu_cust", "get_customer", {"email": "a@b.com"})
TRACKING = ("toolu_track", "get_tracking", {"order_id": 1042})
ANSWER = "Ada, order #1042 was delivered yesterday."


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", server.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


def thinking_model(**options: Any) -> ModelSettings:
    options.setdefault("thinking_budget_tokens", BUDGET)
    return ModelSettings(provider="anthropic", model=MODEL, retry=FAST_MODEL_RETRY, **options)


def thinking_input(**options: Any) -> AgentInput:
    return AgentInput(
        prompt="where is order 1042",
        tools=options.pop("tools", TOOLS),
        model=options.pop("model", thinking_model()),
        **options,
    )


def assert_every_request_valid(fake: FakeAnthropic) -> None:
    for number, request in enumerate(fake.requests, start=1):
        refused = request_error(request.body)
        assert refused is None, f"request #{number} would be refused: {refused.body}"


def thinking_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] in ("thinking", "redacted_thinking")
    ]


async def test_thinking_goes_back_signed_across_parallel_calls(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    fake.script += [
        Reply(thinking="The customer wants order 1042: search first.", tool_uses=[SEARCH]),
        Reply(
            "Found it; checking the customer and the parcel.",
            thinking="Two lookups, independent: ask for both at once.",
            redacted_thinking="(something the safety system encrypted)",
            tool_uses=[CUSTOMER, TRACKING],
        ),
        Reply(ANSWER, thinking="The parcel was delivered: answer."),
    ]
    run = await run_agent(client, task_queue, thinking_input())

    assert run.result is not None, run.error
    assert run.result.answer == ANSWER
    assert fake.remaining == 0 and len(fake.requests) == 3
    assert_every_request_valid(fake)
    first, second, third = (request.body for request in fake.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": BUDGET}
    assert first["max_tokens"] == BUDGET + anthropic_provider.DEFAULT_MAX_TOKENS
    beta = fake.requests[0].headers["anthropic-beta"]
    assert beta == anthropic_provider.INTERLEAVED_THINKING_BETA
    # Each tool-use turn goes back starting with its thinking, exactly as the API sent it.
    assert second["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "The customer wants order 1042: search first.",
        "signature": signature("The customer wants order 1042: search first."),
    }
    turn = third["messages"][3]["content"]
    assert [block["type"] for block in turn] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert thinking_blocks(third)[:1] == thinking_blocks(second)
    # The transcript holds them tagged with their provider and API.
    parts = [p for m in run.transcript if isinstance(m, AssistantMessage) for p in m.reasoning]
    assert [(p.provider, p.api, p.kind) for p in parts] == [
        ("anthropic", "messages", "thinking"),
        ("anthropic", "messages", "thinking"),
        ("anthropic", "messages", "redacted_thinking"),
        ("anthropic", "messages", "thinking"),
    ]
    # Thinking tokens are counted (a part of the output tokens, priced with them).
    records = run.result.step_records
    assert [r.usage.reasoning_tokens for r in records] == [
        (len(t) + 3) // 4
        for t in (
            "The customer wants order 1042: search first.",
            "Two lookups, independent: ask for both at once."
            "(something the safety system encrypted)",
            "The parcel was delivered: answer.",
        )
    ]
    assert run.result.usage.reasoning_tokens == sum(r.usage.reasoning_tokens for r in records)
    assert all(r.usage.reasoning_tokens < r.usage.output_tokens for r in records)
    assert all(r.reasoning_left_out == 0 for r in records)


def _open_turn(thinking: str = "Search first.") -> list[Message]:
    """A transcript whose open tool-use turn was written with thinking on."""
    block = {"type": "thinking", "thinking": thinking, "signature": signature(thinking)}
    part = ReasoningPart(
        provider="anthropic",
        api="messages",
        model=MODEL,
        kind="thinking",
        data=json.dumps(block),
    )
    call = anthropic_provider.ToolCall(id="toolu_1", name="search_orders", arguments="{}")
    return [
        UserMessage(content="where is order 1042"),
        AssistantMessage(tool_calls=(call,), reasoning=(part,)),
        ToolResult(tool_call_id="toolu_1", tool_name="search_orders", content="[]"),
    ]


def _request(messages: list[Message], **settings: Any) -> ModelRequest:
    return ModelRequest(
        settings=thinking_model(**settings), system=None, messages=messages, tools=[], step=2
    )


async def test_dropping_the_thinking_on_purpose_gets_the_apis_400(fake: FakeAnthropic) -> None:
    messages = _open_turn()
    fake.script += [Reply("fine")]
    assert (await anthropic_provider.complete(_request(messages))).message.content == "fine"

    dropped = [m.model_copy(update={"reasoning": ()}) for m in messages if m.role == "assistant"]
    with pytest.raises(AgentProviderError) as refused:
        await anthropic_provider.complete(_request([messages[0], *dropped, messages[2]]))
    assert MISSING_THINKING.format(index=1, found="tool_use") in str(refused.value)
    assert "HTTP 400" in str(refused.value)


async def test_a_changed_thinking_block_gets_the_apis_400(fake: FakeAnthropic) -> None:
    messages = _open_turn()
    part = messages[1].reasoning[0]  # type: ignore[union-attr]
    block = json.loads(part.data)
    block["thinking"] += " "  # one space: the signature no longer matches
    changed = messages[1].model_copy(
        update={"reasoning": (part.model_copy(update={"data": json.dumps(block)}),)}
    )
    with pytest.raises(AgentProviderError, match="Invalid `signature` in `thinking` block"):
        await anthropic_provider.complete(_request([messages[0], changed, messages[2]]))


async def test_with_thinking_off_the_thinking_is_left_out_and_counted(
    fake: FakeAnthropic,
) -> None:
    """The API refuses thinking in the open turn of a call without thinking: it is left out."""
    messages = _open_turn()
    fake.script += [Reply("fine")]
    request = _request(messages, thinking_budget_tokens=None)
    response = await anthropic_provider.complete(request)
    assert response.reasoning_left_out == 1
    assert "thinking" not in fake.requests[-1].body
    assert thinking_blocks(fake.requests[-1].body) == []
    # Sent anyway, the fake answers what the API would.
    body = dict(fake.requests[-1].body)
    body["messages"] = anthropic_provider.to_anthropic_messages(messages, thinking=True)
    refused = request_error(body)
    assert refused is not None and "When thinking is disabled" in str(refused.body)


async def test_another_providers_reasoning_is_left_out(fake: FakeAnthropic) -> None:
    messages = _open_turn()
    assistant = messages[1]
    foreign = assistant.reasoning[0].model_copy(  # type: ignore[union-attr]
        update={"provider": "openai-responses", "api": "responses", "data": '{"type":"reasoning"}'}
    )
    mixed = assistant.model_copy(
        update={"reasoning": (*assistant.reasoning, foreign)}  # type: ignore[union-attr]
    )
    fake.script += [Reply("fine")]
    response = await anthropic_provider.complete(_request([messages[0], mixed, messages[2]]))
    assert response.reasoning_left_out == 1
    assert [b["type"] for b in thinking_blocks(fake.requests[-1].body)] == ["thinking"]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"temperature": 0.2}, "temperature=0.2 cannot be set with Anthropic thinking"),
        ({"max_output_tokens": BUDGET}, "must be greater than thinking_budget_tokens=2048"),
        ({"thinking_budget_tokens": 512}, "Anthropic needs at least 1024"),
        ({"adaptive_thinking": True}, "not both"),
        ({"reasoning_effort": "minimal"}, "not one that anthropic takes"),
    ],
)
def test_settings_that_do_not_go_with_thinking_are_refused_up_front(
    options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        thinking_model(**options)


def test_thinking_is_anthropics() -> None:
    with pytest.raises(ValidationError, match="reasoning_effort with provider 'openai-responses'"):
        ModelSettings(provider="openai", thinking_budget_tokens=2048)


async def test_thinking_survives_tool_errors_loop_detection_and_compaction(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    """An unknown tool, a repeated call, and window compaction with continue-as-new: every
    request still keeps the open turn's thinking (the fake refuses any that does not)."""
    same = ("toolu_r{}", "get_order", {"order_id": 1042})
    script = [Reply(thinking="Try a tool.", tool_uses=[("toolu_x", "no_such_tool", {})])]
    for number in range(1, 6):
        call = (same[0].format(number), same[1], same[2])
        script.append(Reply(thinking=f"Look again ({number}). " + "x" * 800, tool_uses=[call]))
    script.append(Reply(ANSWER, thinking="Done."))
    fake.script += script
    run = await run_agent(
        client,
        task_queue,
        thinking_input(
            compaction="window",
            limits=Limits(max_context_tokens=2600),
            compaction_target_ratio=0.9,
            continue_as_new_after_steps=2,
        ),
    )
    assert run.result is not None, run.error
    assert_every_request_valid(fake)
    assert fake.remaining == 0
    assert run.result.compactions, "the run was meant to compact"
    errors = [m for m in run.transcript if isinstance(m, ToolResult) and m.is_error]
    assert len(errors) == 4, "the unknown tool and the 3rd to 5th repeats were meant to fail"
    first_run = client.get_workflow_handle(run.handle.id, run_id=run.handle.first_execution_run_id)
    events = [event.event_type async for event in first_run.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW in events
    # Every request after the first opened on a turn with its thinking first.
    for request in fake.requests[1:]:
        final = fake_anthropic._final_tool_use_turn(request.body["messages"])
        assert final is not None
        assert request.body["messages"][final]["content"][0]["type"] == "thinking"


async def test_thinking_between_calls_goes_back_in_its_place(fake: FakeAnthropic) -> None:
    """Interleaved thinking: a block after a call goes back after that call, before the next."""

    def thought(text: str) -> dict[str, Any]:
        return {"type": "thinking", "thinking": text, "signature": signature(text)}

    content = [
        thought("First the order."),
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_a", "name": "get_order", "input": {"order_id": 1}},
        thought("Then its parcel."),
        {"type": "tool_use", "id": "toolu_b", "name": "get_tracking", "input": {"order_id": 1}},
    ]
    fake.script += [Reply(content=content, stop_reason="tool_use"), Reply("done")]
    first = _request([UserMessage(content="where is order 1")])
    reply = await anthropic_provider.complete(first)
    assert [p.position for p in reply.message.reasoning] == [0, 2]
    results = [
        ToolResult(tool_call_id=call.id, tool_name=call.name, content="{}")
        for call in reply.message.tool_calls
    ]
    await anthropic_provider.complete(_request([*first.messages, reply.message, *results]))
    sent = fake.requests[-1].body["messages"][1]["content"]
    assert sent == content
    assert request_error(fake.requests[-1].body) is None


async def test_adaptive_thinking_and_effort_reach_the_api(fake: FakeAnthropic) -> None:
    fake.script += [Reply("fine", thinking="Short.")]
    settings = {"thinking_budget_tokens": None, "adaptive_thinking": True}
    await anthropic_provider.complete(
        _request([UserMessage(content="hi")], reasoning_effort="high", **settings)
    )
    body = fake.requests[-1].body
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "high"}
    assert body["max_tokens"] == anthropic_provider.DEFAULT_MAX_TOKENS
    assert "anthropic-beta" not in fake.requests[-1].headers
