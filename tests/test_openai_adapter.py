"""The OpenAI adapter through the real SDK against the local fake: mapping both ways, and how
each kind of failure comes out (retryable for Temporal, or run-ending)."""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from temporalio.exceptions import ApplicationError

from durable_agent.activities.providers._http_errors import (
    INCOMPLETE_REPLY_TYPE,
    TRANSIENT_ERROR_TYPE,
    retry_after,
)
from durable_agent.activities.providers.openai_provider import complete
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
from tests.fake_openai import FakeOpenAI, HttpReply, Reply, error

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
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def make_request(
    messages: list[Message],
    *,
    system: str | None = None,
    tools: list[ToolSpec] | None = None,
    **settings: object,
) -> ModelRequest:
    return ModelRequest(
        settings=ModelSettings(provider="openai", model="gpt-test", **settings),
        system=system,
        messages=messages,
        tools=tools or [],
        step=1,
    )


ASKED = AssistantMessage(
    content="Adding and searching.",
    tool_calls=(
        ToolCall(id="call_a", name="add", arguments='{"a": 1,  "b":2}'),
        ToolCall(id="call_b", name="search", arguments='{"q": "unterminated'),
    ),
)


async def test_request_maps_system_tools_calls_and_results(fake: FakeOpenAI) -> None:
    fake.script += [Reply("3"), Reply("3")]
    request = make_request(
        [
            UserMessage(content="What is 1+2?"),
            ASKED,
            ToolResult(tool_call_id="call_a", tool_name="add", content="3"),
            ToolResult(tool_call_id="call_b", tool_name="search", content="bad", is_error=True),
        ],
        system="Be brief.",
        tools=[SEARCH, ADD],
        temperature=0.2,
        max_output_tokens=64,
    )
    await complete(request)

    sent = fake.requests[0]
    assert sent.headers["authorization"] == f"Bearer {fake.api_key}"
    assert sent.body["model"] == "gpt-test"
    assert sent.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 1+2?"},
        {
            "role": "assistant",
            "content": "Adding and searching.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1,  "b":2}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "unterminated'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "3"},
        {"role": "tool", "tool_call_id": "call_b", "content": "bad"},
    ]
    assert sent.body["tools"] == [
        {
            "type": "function",
            "function": spec.model_dump(include={"name", "description", "parameters"}),
        }
        for spec in (SEARCH, ADD)
    ]
    assert [tool["function"]["name"] for tool in sent.body["tools"]] == ["search", "add"]
    assert sent.body["parallel_tool_calls"] is True
    assert sent.body["temperature"] == 0.2
    assert sent.body["max_completion_tokens"] == 64

    # The same transcript gives the same bytes, so the provider's prompt cache can match it.
    await complete(request.model_copy(deep=True))
    assert fake.requests[1].raw == sent.raw
    assert fake.remaining == 0


async def test_unset_options_and_empty_tools_are_left_out(fake: FakeOpenAI) -> None:
    fake.script.append(Reply("hello"))
    await complete(make_request([UserMessage(content="hi")]))

    body = fake.requests[0].body
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    for absent in ("tools", "parallel_tool_calls", "temperature", "max_completion_tokens"):
        assert absent not in body


async def test_reply_maps_parallel_calls_usage_and_cached_tokens(fake: FakeOpenAI) -> None:
    fake.script.append(
        Reply(
            content="Two at once.",
            tool_calls=[("call_x", "add", '{"a":1,"b":2}'), ("call_y", "search", '{"q": ')],
            prompt_tokens=1500,
            completion_tokens=42,
            cached_tokens=1024,
            model="gpt-test-2025-01-01",
        )
    )
    response = await complete(make_request([UserMessage(content="go")], tools=[ADD, SEARCH]))

    assert response.message == AssistantMessage(
        content="Two at once.",
        tool_calls=(
            ToolCall(id="call_x", name="add", arguments='{"a":1,"b":2}'),
            ToolCall(id="call_y", name="search", arguments='{"q": '),
        ),
    )
    assert (response.usage.input_tokens, response.usage.output_tokens) == (1500, 42)
    assert response.usage.cached_input_tokens == 1024
    assert response.model == "gpt-test-2025-01-01"
    assert response.finish_reason == "tool_calls"


async def test_reply_maps_cache_writes_and_reasoning_tokens(fake: FakeOpenAI) -> None:
    """GPT-5.6 and later report the prompt tokens they wrote to the cache (and bill them):
    a part of prompt_tokens, as the cached ones are."""
    fake.script.append(
        Reply(
            "ok",
            prompt_tokens=5000,
            cached_tokens=1024,
            cache_write_tokens=3968,
            completion_tokens=300,
            reasoning_tokens=256,
        )
    )
    response = await complete(make_request([UserMessage(content="go")]))

    assert response.usage == Usage(
        input_tokens=5000,
        output_tokens=300,
        cached_input_tokens=1024,
        cache_write_tokens=3968,
        reasoning_tokens=256,
    )


async def test_final_text_reply(fake: FakeOpenAI) -> None:
    fake.script.append(Reply("The answer is 3.", prompt_tokens=10, completion_tokens=5))
    response = await complete(make_request([UserMessage(content="1+2?")]))

    assert response.message == AssistantMessage(content="The answer is 3.")
    assert response.finish_reason == "stop"
    assert response.usage.cached_input_tokens == 0


async def test_broken_pairing_is_a_provider_error_after_one_request(fake: FakeOpenAI) -> None:
    fake.script.append(Reply("never sent"))
    # Built by hand: a Transcript would refuse this sequence, the point is what the API does.
    broken: list[Message] = [
        UserMessage(content="go"),
        ASKED,
        ToolResult(tool_call_id="call_a", tool_name="add", content="3"),
        UserMessage(content="and?"),
    ]
    with pytest.raises(AgentProviderError) as raised:
        await complete(make_request(broken, system="sys", tools=[ADD, SEARCH]))

    assert raised.value.non_retryable
    assert "400" in raised.value.message
    assert "The following tool_call_ids did not have response messages: call_b" in (
        raised.value.message
    )
    assert len(fake.requests) == 1
    assert fake.remaining == 1


async def test_result_without_a_call_is_a_provider_error(fake: FakeOpenAI) -> None:
    orphan: list[Message] = [
        UserMessage(content="go"),
        ToolResult(tool_call_id="call_z", tool_name="add", content="3"),
    ]
    with pytest.raises(AgentProviderError) as raised:
        await complete(make_request(orphan))

    assert "messages with role 'tool' must be a response to a preceeding message" in (
        raised.value.message
    )
    assert len(fake.requests) == 1


async def test_wrong_key_is_a_provider_error_naming_the_variable(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-1234")
    with pytest.raises(AgentProviderError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.non_retryable
    assert "401" in raised.value.message
    assert "Incorrect API key provided" in raised.value.message
    assert "OPENAI_API_KEY" in raised.value.message
    assert len(fake.requests) == 1


async def test_rate_limit_is_retryable_after_the_servers_delay(fake: FakeOpenAI) -> None:
    fake.script.append(
        error(
            429,
            "Rate limit reached for gpt-test",
            type="requests",
            code="rate_limit_exceeded",
            headers={"retry-after": "7"},
        )
    )
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert not isinstance(raised.value, AgentProviderError)
    assert raised.value.type == TRANSIENT_ERROR_TYPE
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay == timedelta(seconds=7)
    assert "Rate limit reached for gpt-test" in raised.value.message
    assert len(fake.requests) == 1  # the SDK's own retries are off


async def test_server_error_is_retryable(fake: FakeOpenAI) -> None:
    fake.script.append(error(503, "The engine is currently overloaded", type="server_error"))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == TRANSIENT_ERROR_TYPE
    assert not raised.value.non_retryable
    assert raised.value.next_retry_delay is None
    assert "503" in raised.value.message and "overloaded" in raised.value.message
    assert len(fake.requests) == 1


async def test_reply_without_choices_is_retryable(fake: FakeOpenAI) -> None:
    empty = {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [],
    }
    fake.script.append(HttpReply(200, empty))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == INCOMPLETE_REPLY_TYPE
    assert not raised.value.non_retryable
    assert "empty reply (no choices)" in raised.value.message


async def test_choice_without_a_message_is_an_incomplete_reply(fake: FakeOpenAI) -> None:
    garbled = {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "stop"}],
    }
    fake.script.append(HttpReply(200, garbled))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == INCOMPLETE_REPLY_TYPE
    assert not raised.value.non_retryable
    assert "without a message" in raised.value.message


@pytest.mark.parametrize(
    ("reply", "where"),
    [
        (
            Reply("Let me add", tool_calls=[("call_a", "add", '{"a": 1, "b"')]),
            "in the middle of a tool call",
        ),
        (Reply("The answer is a long sto"), "in the middle of its text"),
    ],
)
async def test_a_reply_cut_off_at_the_length_limit_is_incomplete(
    fake: FakeOpenAI, reply: Reply, where: str
) -> None:
    reply.finish_reason = "length"
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


async def test_an_empty_reply_is_incomplete(fake: FakeOpenAI) -> None:
    fake.script.append(Reply(None))
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == INCOMPLETE_REPLY_TYPE
    assert not raised.value.non_retryable
    assert "empty reply: no text and no tool calls" in raised.value.message


async def test_a_refusal_is_the_text(fake: FakeOpenAI) -> None:
    refusal = {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": "I can't help."},
            }
        ],
    }
    fake.script.append(HttpReply(200, refusal))
    response = await complete(make_request([UserMessage(content="hi")]))

    assert response.message == AssistantMessage(content="I can't help.")


async def test_unreachable_endpoint_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ApplicationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert raised.value.type == TRANSIENT_ERROR_TYPE
    assert not raised.value.non_retryable


async def test_missing_key_is_a_configuration_error_without_a_request(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(AgentConfigurationError) as raised:
        await complete(make_request([UserMessage(content="hi")]))

    assert "OPENAI_API_KEY is not set" in raised.value.message
    assert raised.value.non_retryable
    assert fake.requests == []


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500", "retry-after": "2"}, timedelta(seconds=1.5)),
        ({"retry-after": "2.5"}, timedelta(seconds=2.5)),
        ({"retry-after": "3600"}, timedelta(seconds=60)),
        ({"retry-after": "0"}, None),
        ({"retry-after": "-4"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str], expected: timedelta | None) -> None:
    assert retry_after(headers) == expected


def test_retry_after_http_date() -> None:
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    delay = retry_after({"retry-after": in_ten})
    assert delay is not None and timedelta(seconds=8) <= delay <= timedelta(seconds=10)
    assert retry_after({"retry-after": email.utils.formatdate(time.time() - 10)}) is None
