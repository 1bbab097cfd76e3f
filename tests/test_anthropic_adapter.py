"""The Anthropic adapter through the real SDK against the local fake: mapping both ways, the
prompt-cache breakpoints, and how each kind of failure comes out (retryable for Temporal, or
run-ending)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from durable_agent.activities.providers._http_errors import (
    INCOMPLETE_REPLY_TYPE,
    TRANSIENT_ERROR_TYPE,
)
from durable_agent.activities.providers.anthropic_provider import complete
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.errors import AgentConfigurationError, AgentProviderError
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import ToolSpec
from durable_agent.workflows.transcript import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    UserMessage,
)
from durable_agent.workflows.usage import Usage
from tests.fake_anthropic import (
    FakeAnthropic,
    HttpReply,
    Reply,
    error,
    pairing_error,
    request_error,
    sent_key,
)

MODEL = "claude-test-1"
EPHEMERAL = {"type": "ephemeral"}
ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
SEARCH = ToolSpec(
    name="search",
    description="Search the notes.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", server.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


def make_request(
    messages: list[Message],
    *,
    system: str | None = None,
    tools: list[ToolSpec] | None = None,
    **settings: Any,
) -> ModelRequest:
    return ModelRequest(
        settings=ModelSettings(provider="anthropic", model=MODEL, **settings),
        system=system,
        messages=messages,
        tools=tools or [],
        step=1,
    )


ASKED = AssistantMessage(
    content="Adding and searching.",
    tool_calls=(
        ToolCall(id="toolu_a", name="add", arguments='{"a": 1,  "b":2}'),
        ToolCall(id="toolu_b", name="search", arguments='{"q": "unterminated'),
    ),
)
TRANSCRIPT: list[Message] = [
    UserMessage(content="What is 1+2?"),
    ASKED,
    ToolResult(tool_call_id="toolu_a", tool_name="add", content="3"),
    ToolResult(tool_call_id="toolu_b", tool_name="search", content="bad", is_error=True),
    UserMessage(content="Please answer now."),
]


def cache_paths(value: Any, path: str = "") -> list[str]:
    """Where `cache_control` appears anywhere in a request body."""
    found = []
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "cache_control":
                found.append(path)
            found += cache_paths(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += cache_paths(inner, f"{path}[{index}]")
    return found


async def test_request_maps_system_tools_calls_and_results(fake: FakeAnthropic) -> None:
    fake.script += [Reply("3"), Reply("3")]
    request = make_request(
        TRANSCRIPT,
        system="Be brief.",
        tools=[SEARCH, ADD],
        temperature=0.2,
        max_output_tokens=64,
    )
    await complete(request)

    sent = fake.requests[0]
    assert sent.path == "/v1/messages"
    assert sent_key(sent.headers) == fake.api_key
    assert sent.headers["anthropic-version"]
    body = sent.body
    assert body["model"] == MODEL
    assert body["max_tokens"] == 64
    assert body["temperature"] == 0.2
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is 1+2?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Adding and searching."},
                {"type": "tool_use", "id": "toolu_a", "name": "add", "input": {"a": 1, "b": 2}},
                # Not a JSON object: sent as {} so the call still pairs with its result.
                {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {}},
            ],
        },
        # Both results and the nudge after them: one user turn, results first, in call order.
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "3"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "bad",
                    "is_error": True,
                },
                {"type": "text", "text": "Please answer now.", "cache_control": EPHEMERAL},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "search",
            "description": "Search the notes.",
            "input_schema": SEARCH.parameters,
        },
        {
            "name": "add",
            "description": "Add two integers.",
            "input_schema": ADD.parameters,
            "cache_control": EPHEMERAL,
        },
    ]
    assert sorted(cache_paths(body)) == [
        "messages[2].content[2]",
        "system[0]",
        "tools[1]",
    ]

    # The same transcript gives the same bytes, so the provider's prompt cache can match it.
    await complete(request.model_copy(deep=True))
    assert fake.requests[1].raw == sent.raw
    assert fake.remaining == 0


async def test_cache_breakpoint_on_a_tool_result_and_nowhere_else(fake: FakeAnthropic) -> None:
    fake.script.append(Reply("3"))
    await complete(make_request(TRANSCRIPT[:4], system="sys", tools=[ADD, SEARCH]))

    body = fake.requests[0].body
    last = body["messages"][-1]["content"]
    assert [block["type"] for block in last] == ["tool_result", "tool_result"]
    assert last[-1]["cache_control"] == EPHEMERAL
    assert sorted(cache_paths(body)) == ["messages[2].content[1]", "system[0]", "tools[1]"]


async def test_each_step_resends_the_previous_request_as_its_prefix(fake: FakeAnthropic) -> None:
    fake.script += [Reply("ok"), Reply("ok")]
    first = TRANSCRIPT[:4]
    second = [
        *first,
        AssistantMessage(
            content="Checking again.",
            tool_calls=(ToolCall(id="toolu_c", name="add", arguments='{"a":3,"b":4}'),),
        ),
        ToolResult(tool_call_id="toolu_c", tool_name="add", content="7"),
    ]
    await complete(make_request(first, system="sys", tools=[ADD, SEARCH]))
    await complete(make_request(second, system="sys", tools=[ADD, SEARCH]))

    one, two = (request.body for request in fake.requests)
    assert one["tools"] == two["tools"] and one["system"] == two["system"]
    # Request 1's messages, without the moving breakpoint, open request 2 unchanged.
    previous = json.loads(json.dumps(one["messages"]))
    del previous[-1]["content"][-1]["cache_control"]
    assert two["messages"][: len(previous)] == previous
    assert len(cache_paths(two)) == 3


@pytest.mark.parametrize("purpose", ["judge", "summary"])
async def test_a_request_sent_once_carries_no_cache_breakpoint(
    fake: FakeAnthropic, purpose: str
) -> None:
    """A judge's or a summary's prefix is never read again: a breakpoint would write a cache
    at 1.25x the input price for nothing."""
    fake.script.append(Reply("ok"))
    request = make_request(TRANSCRIPT, system="sys", tools=[ADD, SEARCH])
    await complete(request.model_copy(update={"purpose": purpose}))

    assert cache_paths(fake.requests[0].body) == []


async def test_unset_options_and_empty_tools_are_left_out(fake: FakeAnthropic) -> None:
    fake.script.append(Reply("hello"))
    await complete(make_request([UserMessage(content="hi")]))

    body = fake.requests[0].body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]
    assert body["max_tokens"] == 4096
    for absent in ("system", "tools", "temperature", "tool_choice", "stream"):
        assert absent not in body


async def test_reply_maps_parallel_calls_text_and_cache_usage(fake: FakeAnthropic) -> None:
    fake.script.append(
        Reply(
            "Two at once.",
            tool_uses=[("toolu_x", "add", {"a": 1, "b": 2}), ("toolu_y", "search", {"q": "é"})],
            input_tokens=120,
            cache_read_input_tokens=2048,
            cache_creation_input_tokens=300,
            output_tokens=42,
            model="claude-test-1-20250101",
        )
    )
    response = await complete(make_request([UserMessage(content="go")], tools=[ADD, SEARCH]))

    assert response.message == AssistantMessage(
        content="Two at once.",
        tool_calls=(
            ToolCall(id="toolu_x", name="add", arguments='{"a":1,"b":2}'),
            ToolCall(
                id="toolu_y", name="search", arguments=json.dumps({"q": "é"}).replace(" ", "")
            ),
        ),
    )
    assert response.usage == Usage(
        input_tokens=120 + 2048 + 300,
        output_tokens=42,
        cached_input_tokens=2048,
        cache_write_tokens=300,
    )
    assert response.model == "claude-test-1-20250101"
    assert response.finish_reason == "tool_use"


async def test_final_text_reply_joins_its_text_blocks(fake: FakeAnthropic) -> None:
    fake.script.append(
        Reply(
            content=[{"type": "text", "text": "The answer "}, {"type": "text", "text": "is 3."}],
            input_tokens=10,
            output_tokens=5,
        )
    )
    response = await complete(make_request([UserMessage(content="1+2?")]))

    assert response.message == AssistantMessage(content="The answer is 3.")
    assert response.finish_reason == "end_turn"
    assert response.usage == Usage(input_tokens=10, output_tokens=5)


async def test_broken_pairing_is_a_provider_error_after_one_request(fake: FakeAnthropic) -> None:
    fake.script.append(Reply("never sent"))
    # Built by hand: a Transcript would refuse this sequence, the point is what the API does.
    broken: list[Message] = [
        UserMessage(content="go"),
        ASKED,
        ToolResult(tool_call_id="toolu_a", tool_name="add", content="3"),
        UserMessage(content="and?"),
    ]
    with pytest.raises(AgentProviderError) as raised:
        await complete(make_request(broken, system="sys", tools=[ADD, SEARCH]))

    assert raised.value.non_retryable
    assert "HTTP 400" in raised.value.message
    assert (
        "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_b."
    ) in raised.value.message
    assert len(fake.requests) == 1
    assert fake.remaining == 1


async def test_result_without_a_call_is_a_provider_error(fake: FakeAnthropic) -> None:
    orphan: list[Message] = [
        UserMessage(content="go"),
        AssistantMessage(content="Let me see."),
        ToolResult(tool_call_id="toolu_z", tool_name="add", content="3"),
    ]
    with pytest.raises(AgentProviderError) as raised:
        await complete(make_request(orphan))

    assert "unexpected `tool_use_id` found in `tool_result` blocks: toolu_z" in (
        raised.value.message
    )
    assert len(fake.requests) == 1


async def test_wrong_key_is_a_provider_error_naming_the_variable(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-1234")
    fake.script.append(Reply("never sent"))
    with pytest.raises(AgentProviderError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.non_retryable
    assert "HTTP 401" in raised.value.message
    assert "invalid x-api-key" in raised.value.message
    assert "ANTHROPIC_API_KEY" in raised.value.message
    assert "request id req_fake0001" in raised.value.message
    assert len(fake.requests) == 1 and fake.remaining == 1
    assert sent_key(fake.requests[0].headers) == "sk-ant-wrong-1234"


async def test_rate_limit_is_retryable_after_the_servers_delay(fake: FakeAnthropic) -> None:
    fake.script.append(
        error(
            429,
            "Number of request tokens has exceeded your per-minute rate limit",
            type="rate_limit_error",
            headers={"retry-after": "7"},
        )
    )
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert not isinstance(raised.value, AgentProviderError)
    assert raised.value.type == TRANSIENT_ERROR_TYPE
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay == timedelta(seconds=7)
    assert "HTTP 429" in raised.value.message and "per-minute rate limit" in raised.value.message
    assert len(fake.requests) == 1  # the SDK's own retries are off


async def test_overload_is_retryable(fake: FakeAnthropic) -> None:
    fake.script.append(error(529, "Overloaded", type="overloaded_error"))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == TRANSIENT_ERROR_TYPE
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay is None
    assert "HTTP 529" in raised.value.message and "Overloaded" in raised.value.message
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    ("reply", "where"),
    [
        (
            Reply("Let me add.", tool_uses=[("toolu_a", "add", {"a": 1})]),
            "in the middle of a tool call",
        ),
        (Reply("The answer is a long sto"), "in the middle of its text"),
        (Reply(content=[]), "before it wrote anything"),
    ],
)
async def test_a_reply_stopped_at_max_tokens_is_incomplete(
    fake: FakeAnthropic, reply: Reply, where: str
) -> None:
    reply.stop_reason = "max_tokens"
    fake.script.append(reply)
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="go")], tools=[ADD], max_output_tokens=16))

    assert not isinstance(raised.value, AgentProviderError)
    assert raised.value.type == INCOMPLETE_REPLY_TYPE
    assert not raised.value.non_retryable
    assert (
        "the reply was cut off at the output-token limit (max_output_tokens=16) " + where
    ) in raised.value.message
    assert len(fake.requests) == 1


async def test_the_default_limit_is_named_when_cut_off(fake: FakeAnthropic) -> None:
    fake.script.append(Reply("Long", stop_reason="max_tokens"))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="go")]))

    assert "(max_output_tokens=4096)" in raised.value.message


@pytest.mark.parametrize(
    "reply",
    [Reply(content=[]), Reply(""), Reply("  \n"), Reply(content=[], stop_reason="refusal")],
    ids=["no-blocks", "empty-text", "blank-text", "refusal-without-text"],
)
async def test_an_empty_reply_is_incomplete(fake: FakeAnthropic, reply: Reply) -> None:
    fake.script.append(reply)
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == INCOMPLETE_REPLY_TYPE
    assert not raised.value.non_retryable
    assert MODEL in raised.value.message


async def test_a_refusal_with_text_is_the_answer(fake: FakeAnthropic) -> None:
    fake.script.append(
        Reply(
            "I can't help with that.",
            tool_uses=[("toolu_a", "add", {"a": 1})],
            stop_reason="refusal",
        )
    )
    response = await complete(make_request([UserMessage(content="hi")], tools=[ADD]))

    assert response.message == AssistantMessage(content="I can't help with that.")
    assert response.finish_reason == "refusal"


async def test_a_reply_that_cannot_be_read_is_incomplete(fake: FakeAnthropic) -> None:
    fake.script.append(HttpReply(200, {"id": "msg_0", "type": "message", "role": "assistant"}))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == INCOMPLETE_REPLY_TYPE
    assert "could not be read" in raised.value.message


async def test_unreachable_endpoint_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == TRANSIENT_ERROR_TYPE
    assert not raised.value.non_retryable
    assert "could not reach Anthropic" in raised.value.message


async def test_missing_key_is_a_configuration_error_without_a_request(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AgentConfigurationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert "ANTHROPIC_API_KEY is not set" in raised.value.message
    assert raised.value.non_retryable
    assert fake.requests == []


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (
            [{"role": "user", "content": _text("a")}, {"role": "user", "content": _text("b")}],
            'roles must alternate between "user" and "assistant"',
        ),
        ([{"role": "assistant", "content": _text("a")}], 'first message must use the "user"'),
        (
            [
                {"role": "user", "content": _text("a")},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_a", "name": "x", "input": {}}],
                },
            ],
            "messages.2: `tool_use` ids were found without `tool_result` blocks",
        ),
        (
            [{"role": "user", "content": _text("a")}, {"role": "assistant", "content": []}],
            "all messages must have non-empty content",
        ),
        ([{"role": "user", "content": _text(" ")}], "text content blocks must be non-empty"),
    ],
    ids=["user-twice", "assistant-first", "call-at-the-end", "empty-content", "blank-text"],
)
def test_the_fake_refuses_what_the_api_refuses(
    messages: list[dict[str, Any]], expected: str
) -> None:
    refused = pairing_error(messages)
    assert refused is not None and refused.status == 400
    assert expected in refused.body["error"]["message"]


def test_the_fake_allows_at_most_four_cache_breakpoints() -> None:
    marked = {"type": "text", "text": "x", "cache_control": EPHEMERAL}
    body = {"max_tokens": 10, "messages": [{"role": "user", "content": [marked] * 5}]}
    refused = request_error(body)
    assert (
        refused is not None
        and "A maximum of 4 blocks with cache_control" in (refused.body["error"]["message"])
    )
    body["messages"][0]["content"] = [marked] * 4
    assert request_error(body) is None
