"""The whole loop with provider="anthropic": AgentWorkflow on the real dev server, the real
`anthropic` SDK in the model activity, and the local fake of the Messages API behind it."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities import pricing
from tests.fake_anthropic import FakeAnthropic, Reply, error, request_error
from tests.helpers import FAST_MODEL_RETRY, Run, run_agent
from workflows.models import AgentInput, ModelSettings, Usage

MODEL = "claude-sonnet-4-6"
DEMO_TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]
SYSTEM = "You are the support agent of a small shop. Answer from the tools' data only."
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    """An empty fake with the worker's environment pointing at it; tests fill its script."""
    with FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", server.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


def anthropic_input(prompt: str = "where is order 1042", **options: Any) -> AgentInput:
    return AgentInput(
        prompt=prompt,
        tools=options.pop("tools", DEMO_TOOLS),
        model=ModelSettings(provider="anthropic", model=MODEL, retry=FAST_MODEL_RETRY),
        **options,
    )


def assert_every_request_valid(fake: FakeAnthropic) -> None:
    for number, request in enumerate(fake.requests, start=1):
        assert request_error(request.body) is None, f"request #{number} would be refused"


def without_cache_marks(value: Any) -> Any:
    value = copy.deepcopy(value)
    for message in value:
        for block in message["content"]:
            block.pop("cache_control", None)
    return value


def model_attempts(events: Any) -> list[Any]:
    """The ActivityTaskStarted attributes of the run's call_model activities."""
    scheduled: dict[int, str] = {}
    started = []
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            if scheduled.get(attributes.scheduled_event_id) == "call_model":
                started.append(attributes)
    return started


async def started_model_attempts(run: Run) -> list[Any]:
    history = await run.handle.fetch_history()
    return model_attempts(history.events)


async def test_multi_step_run_over_the_demo_tools(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    fake.script += [
        Reply(
            tool_uses=[("toolu_search", "search_orders", {"email": "a@b.com"})],
            input_tokens=500,
            cache_creation_input_tokens=1200,
            output_tokens=30,
        ),
        Reply(
            "Found order 1042; checking the customer and the parcel.",
            tool_uses=[
                ("toolu_cust", "get_customer", {"email": "a@b.com"}),
                ("toolu_track", "get_tracking", {"order_id": 1042}),
            ],
            input_tokens=80,
            cache_read_input_tokens=1200,
            cache_creation_input_tokens=400,
            output_tokens=45,
        ),
        Reply(
            "Ada, order #1042 was delivered yesterday at 14:20 UTC.",
            input_tokens=60,
            cache_read_input_tokens=1600,
            cache_creation_input_tokens=300,
            output_tokens=25,
        ),
    ]
    run = await run_agent(client, task_queue, anthropic_input(system=SYSTEM))

    assert run.result is not None, run.error
    assert run.result.answer == "Ada, order #1042 was delivered yesterday at 14:20 UTC."
    assert run.result.steps == 3
    assert fake.remaining == 0 and len(fake.requests) == 3
    assert_every_request_valid(fake)

    # Usage: input counts every input token, cache reads and writes included.
    usage = run.result.usage
    assert (usage.input_tokens, usage.output_tokens) == (1700 + 1680 + 1960, 100)
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (2800, 1900)
    assert [r.usage.cached_input_tokens for r in run.result.step_records] == [0, 1200, 1600]
    assert [r.usage.cache_write_tokens for r in run.result.step_records] == [1200, 400, 300]
    assert {r.model for r in run.result.step_records} == {MODEL}
    # Cost by hand from the claude-sonnet-4-6 list price ($ per million tokens).
    price = pricing.SHIPPED_PRICES[MODEL]
    assert (price.input, price.cached_input, price.cache_write, price.output) == (
        3.0,
        0.30,
        3.75,
        15.0,
    )
    uncached = (500 + 80 + 60) * 3.0
    reads = (1200 + 1600) * 0.30
    writes = (1200 + 400 + 300) * 3.75
    output = (30 + 45 + 25) * 15.0
    assert usage.cost_usd == pytest.approx((uncached + reads + writes + output) / 1e6, abs=1e-12)
    assert usage.cost_usd == pytest.approx(0.011385, abs=1e-12)

    first, second, third = (request.body for request in fake.requests)
    assert first["model"] == MODEL and first["max_tokens"] == 4096
    assert first["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    offered = [tool["name"] for tool in first["tools"]]
    assert offered == [*DEMO_TOOLS, "finish"]
    assert [("cache_control" in tool) for tool in first["tools"]] == [False] * 4 + [True]
    assert first["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "where is order 1042", "cache_control": EPHEMERAL}
            ],
        }
    ]

    # Request 2: the call, then its result with the real rows from SQLite.
    second_messages = second["messages"]
    assert second_messages[1] == {
        "role": "assistant",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_search",
                "name": "search_orders",
                "input": {"email": "a@b.com"},
            }
        ],
    }
    (result,) = second_messages[2]["content"]
    assert second_messages[2]["role"] == "user"
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_search"
    assert "is_error" not in result and result["cache_control"] == EPHEMERAL
    search = json.loads(result["content"])
    assert search["total_orders"] == 3 and search["orders"][0]["id"] == 1042
    assert len(second_messages) == 3

    # Request 3: request 2 as its prefix (only the moving cache breakpoint differs), then both
    # parallel calls in one assistant turn with the text before them, and both results in one
    # user turn, in call order.
    third_messages = third["messages"]
    assert third["tools"] == second["tools"] and third["system"] == second["system"]
    assert without_cache_marks(third_messages[:3]) == without_cache_marks(second_messages)
    assert third_messages[3] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Found order 1042; checking the customer and the parcel."},
            {
                "type": "tool_use",
                "id": "toolu_cust",
                "name": "get_customer",
                "input": {"email": "a@b.com"},
            },
            {
                "type": "tool_use",
                "id": "toolu_track",
                "name": "get_tracking",
                "input": {"order_id": 1042},
            },
        ],
    }
    results = third_messages[4]["content"]
    assert third_messages[4]["role"] == "user" and len(third_messages) == 5
    assert [(b["type"], b["tool_use_id"]) for b in results] == [
        ("tool_result", "toolu_cust"),
        ("tool_result", "toolu_track"),
    ]
    assert json.loads(results[0]["content"])["name"] == "Ada Byron"
    tracking = json.loads(results[1]["content"])
    assert tracking["order_id"] == 1042 and "14:20" in tracking["summary"]
    assert "cache_control" not in results[0] and results[1]["cache_control"] == EPHEMERAL
    assert not any(r.is_error for r in run.transcript if r.role == "tool")


async def test_tool_errors_reach_the_model_flagged_as_errors(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    fake.script += [
        Reply(
            tool_uses=[
                ("toolu_bad_args", "get_order", {"order_id": "abc"}),
                ("toolu_no_tool", "lookup_weather", {"city": "Paris"}),
                ("toolu_ok", "get_order", {"order_id": 1042}),
            ]
        ),
        Reply("I could not look everything up."),
    ]
    run = await run_agent(client, task_queue, anthropic_input())

    assert run.result is not None, run.error
    assert run.result.answer == "I could not look everything up." and run.result.steps == 2
    assert fake.remaining == 0 and len(fake.requests) == 2
    assert_every_request_valid(fake)

    results = fake.requests[1].body["messages"][2]["content"]
    assert [(b["tool_use_id"], b.get("is_error", False)) for b in results] == [
        ("toolu_bad_args", True),
        ("toolu_no_tool", True),
        ("toolu_ok", False),
    ]
    assert results[0]["content"].startswith("Error: invalid arguments for get_order")
    assert "order_id: Input should be a valid integer" in results[0]["content"]
    assert results[1]["content"].startswith("Error: no tool named 'lookup_weather'.")
    assert json.loads(results[2]["content"])["id"] == 1042
    outcomes = [(c.id, c.outcome) for c in run.result.step_records[0].tool_calls]
    assert outcomes == [("toolu_bad_args", "error"), ("toolu_no_tool", "error"), ("toolu_ok", "ok")]


async def test_a_rate_limit_is_retried_after_the_servers_delay(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    fake.script += [
        error(
            429,
            "Number of request tokens has exceeded your per-minute rate limit",
            type="rate_limit_error",
            headers={"retry-after": "1"},
        ),
        Reply("Delivered yesterday."),
    ]
    started = time.monotonic()
    run = await run_agent(client, task_queue, anthropic_input())
    elapsed = time.monotonic() - started

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2 and fake.remaining == 0
    assert fake.requests[0].raw == fake.requests[1].raw
    # The server's one second, not the policy's 50 ms.
    assert elapsed >= 1.0

    (attempt,) = await started_model_attempts(run)
    assert attempt.attempt == 2
    assert attempt.last_failure.application_failure_info.type == "ProviderTransientError"
    assert "HTTP 429" in attempt.last_failure.message


async def test_server_errors_are_retried_by_temporal(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    fake.script += [
        error(500, "Internal server error", type="api_error"),
        error(529, "Overloaded", type="overloaded_error"),
        Reply("Delivered yesterday."),
    ]
    run = await run_agent(client, task_queue, anthropic_input())

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday."
    assert len(fake.requests) == 3 and fake.remaining == 0
    assert len({request.raw for request in fake.requests}) == 1
    (attempt,) = await started_model_attempts(run)
    assert attempt.attempt == 3
    assert "HTTP 529" in attempt.last_failure.message


async def test_a_reply_cut_off_at_max_tokens_is_retried_then_fails_the_run(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    cut_off = Reply(
        "Let me look that up.",
        tool_uses=[("toolu_cut", "search_orders", {})],
        stop_reason="max_tokens",
    )
    fake.script += [copy.deepcopy(cut_off) for _ in range(3)]
    run = await run_agent(client, task_queue, anthropic_input())

    assert run.failure.type == "AgentProviderError"
    assert run.failure.message.startswith(
        "model call failed after its retries: ProviderIncompleteReply: "
    )
    assert (
        "the reply was cut off at the output-token limit (max_output_tokens=4096) in the middle "
        "of a tool call"
    ) in run.failure.message
    # The model retry policy's three attempts, and nothing was appended to the transcript.
    assert len(fake.requests) == 3 and fake.remaining == 0
    assert [m.role for m in run.transcript] == ["user"]


async def test_an_empty_reply_is_retried(
    client: Client, task_queue: str, fake: FakeAnthropic
) -> None:
    fake.script += [Reply(content=[]), Reply("Delivered yesterday.")]
    run = await run_agent(client, task_queue, anthropic_input())

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2
    (attempt,) = await started_model_attempts(run)
    assert attempt.last_failure.application_failure_info.type == "ProviderIncompleteReply"


async def test_a_wrong_key_ends_the_run_after_one_request(
    client: Client, task_queue: str, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong-1234")
    fake.script += [Reply("never sent")]
    run = await run_agent(client, task_queue, anthropic_input())

    assert run.failure.type == "AgentProviderError"
    assert run.failure.non_retryable
    assert "HTTP 401" in run.failure.message and "ANTHROPIC_API_KEY" in run.failure.message
    assert "invalid x-api-key" in run.failure.message
    assert len(fake.requests) == 1 and fake.remaining == 1
    assert run.failure.details[0]["steps"] == 0


async def test_a_missing_key_is_a_configuration_error(
    client: Client, task_queue: str, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    fake.script += [Reply("never sent")]
    run = await run_agent(client, task_queue, anthropic_input())

    assert run.failure.type == "AgentConfigurationError"
    assert "ANTHROPIC_API_KEY is not set" in run.failure.message
    assert fake.requests == [] and fake.remaining == 1


def test_usage_sums_like_the_run_does() -> None:
    # The neutral usage of one Anthropic call: input includes cache reads and writes.
    one = Usage(input_tokens=1700, output_tokens=30, cache_write_tokens=1200)
    price = pricing.price_for(MODEL)
    assert pricing.cost_usd(one, price) == pytest.approx(
        (500 * 3.0 + 1200 * 3.75 + 30 * 15.0) / 1e6, abs=1e-12
    )
