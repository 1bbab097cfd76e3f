"""The whole loop with provider="openai": AgentWorkflow on the real dev server, the real `openai`
SDK in the model activity, and the local fake of the Chat Completions API behind it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities import pricing
from tests.fake_openai import FakeOpenAI, Reply, error, pairing_error
from tests.helpers import FAST_MODEL_RETRY, Run, run_agent
from workflows.models import AgentInput, ModelSettings, Usage

MODEL = "gpt-fake-mini"
DEMO_TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """An empty fake with the worker's environment pointing at it; tests fill its script."""
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def openai_input(prompt: str = "where is order 1042", **options: Any) -> AgentInput:
    model = options.pop("model", MODEL)
    return AgentInput(
        prompt=prompt,
        tools=options.pop("tools", DEMO_TOOLS),
        model=ModelSettings(provider="openai", model=model, retry=FAST_MODEL_RETRY),
        **options,
    )


async def started_model_attempts(run: Run) -> list[Any]:
    """The ActivityTaskStarted attributes of the run's call_model activities."""
    history = await run.handle.fetch_history()
    scheduled: dict[int, str] = {}
    started = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            if scheduled.get(attributes.scheduled_event_id) == "call_model":
                started.append(attributes)
    return started


def sent_messages(fake: FakeOpenAI) -> list[list[dict[str, Any]]]:
    return [request.body["messages"] for request in fake.requests]


def assert_no_pairing_error(fake: FakeOpenAI) -> None:
    for number, messages in enumerate(sent_messages(fake), start=1):
        assert pairing_error(messages) is None, f"request #{number} broke the pairing rule"


def tool_call(id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


async def test_multi_step_run_over_the_demo_tools(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        Reply(
            tool_calls=[("call_search", "search_orders", '{"email": "a@b.com"}')],
            prompt_tokens=300,
            completion_tokens=20,
        ),
        Reply(
            "Found order 1042; checking the customer and the parcel.",
            tool_calls=[
                ("call_cust", "get_customer", '{"email": "a@b.com"}'),
                ("call_track", "get_tracking", '{"order_id": 1042}'),
            ],
            prompt_tokens=700,
            completion_tokens=40,
            cached_tokens=256,
        ),
        Reply(
            "Ada, order #1042 was delivered yesterday at 14:20 UTC.",
            prompt_tokens=1100,
            completion_tokens=25,
            cached_tokens=640,
        ),
    ]
    run = await run_agent(client, task_queue, openai_input())

    assert run.result is not None, run.error
    assert run.result.answer == "Ada, order #1042 was delivered yesterday at 14:20 UTC."
    assert run.result.steps == 3
    # gpt-fake-mini has no price: an unknown cost is None, not zero.
    assert run.result.usage == Usage(
        input_tokens=2100, output_tokens=85, cached_input_tokens=896, cost_usd=None
    )
    assert [r.usage.cached_input_tokens for r in run.result.step_records] == [0, 256, 640]
    assert {r.model for r in run.result.step_records} == {MODEL}
    assert fake.remaining == 0 and len(fake.requests) == 3
    assert_no_pairing_error(fake)

    first, second, third = fake.requests
    assert first.body["model"] == MODEL
    offered = [t["function"]["name"] for t in first.body["tools"]]
    assert offered == [*DEMO_TOOLS, "finish"]
    assert first.body["messages"] == [{"role": "user", "content": "where is order 1042"}]

    # Request 2: the call, then its result with the real rows from SQLite.
    second_messages = second.body["messages"]
    assert second_messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("call_search", "search_orders", '{"email": "a@b.com"}')],
    }
    assert second_messages[2]["role"] == "tool"
    assert second_messages[2]["tool_call_id"] == "call_search"
    search = json.loads(second_messages[2]["content"])
    assert search["total_orders"] == 3 and search["orders"][0]["id"] == 1042
    assert len(second_messages) == 3

    # Request 3: the same prefix byte for byte (prompt cache), then both parallel calls in one
    # assistant message with the text beside them, and one result per call id, in call order.
    third_messages = third.body["messages"]
    assert third_messages[:3] == second_messages
    assert third_messages[3] == {
        "role": "assistant",
        "content": "Found order 1042; checking the customer and the parcel.",
        "tool_calls": [
            tool_call("call_cust", "get_customer", '{"email": "a@b.com"}'),
            tool_call("call_track", "get_tracking", '{"order_id": 1042}'),
        ],
    }
    results = third_messages[4:]
    assert [(m["role"], m["tool_call_id"]) for m in results] == [
        ("tool", "call_cust"),
        ("tool", "call_track"),
    ]
    assert json.loads(results[0]["content"])["name"] == "Ada Byron"
    tracking = json.loads(results[1]["content"])
    assert tracking["order_id"] == 1042 and "14:20" in tracking["summary"]
    assert not any(r.is_error for r in run.transcript if r.role == "tool")


async def test_tool_errors_go_back_to_the_model_under_their_ids(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        Reply(
            tool_calls=[
                ("call_bad_args", "get_order", '{"order_id": "abc"}'),
                ("call_no_tool", "lookup_weather", '{"city": "Paris"}'),
            ]
        ),
        Reply("I could not look that up."),
    ]
    run = await run_agent(client, task_queue, openai_input())

    assert run.result is not None, run.error
    assert run.result.answer == "I could not look that up." and run.result.steps == 2
    assert fake.remaining == 0 and len(fake.requests) == 2
    assert_no_pairing_error(fake)

    results = fake.requests[1].body["messages"][2:]
    assert [(m["role"], m["tool_call_id"]) for m in results] == [
        ("tool", "call_bad_args"),
        ("tool", "call_no_tool"),
    ]
    assert results[0]["content"].startswith("Error: invalid arguments for get_order")
    assert "order_id: Input should be a valid integer" in results[0]["content"]
    assert results[1]["content"].startswith("Error: no tool named 'lookup_weather'.")
    assert "get_order" in results[1]["content"]
    outcomes = [(c.id, c.outcome) for c in run.result.step_records[0].tool_calls]
    assert outcomes == [("call_bad_args", "error"), ("call_no_tool", "error")]


async def test_a_provider_400_ends_the_run_without_retries(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [error(400, "Invalid value for 'model': the model does not exist.")]
    run = await run_agent(client, task_queue, openai_input())

    assert run.failure.type == "AgentProviderError"
    assert run.failure.non_retryable
    assert "HTTP 400" in run.failure.message
    assert "Invalid value for 'model': the model does not exist." in run.failure.message
    # A retry would have reached the exhausted script and been recorded as a second request.
    assert len(fake.requests) == 1
    assert run.failure.details[0]["steps"] == 0


async def test_a_wrong_key_ends_the_run_and_names_the_variable(
    client: Client, task_queue: str, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-1234")
    fake.script += [Reply("never sent")]
    run = await run_agent(client, task_queue, openai_input())

    assert run.failure.type == "AgentProviderError"
    assert "HTTP 401" in run.failure.message and "OPENAI_API_KEY" in run.failure.message
    assert "Incorrect API key provided" in run.failure.message
    assert len(fake.requests) == 1 and fake.remaining == 1
    assert fake.requests[0].headers["authorization"] == "Bearer sk-wrong-key-1234"


async def test_a_server_error_is_retried_by_temporal(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        error(500, "The server had an error while processing your request.", type="server_error"),
        Reply("Delivered yesterday."),
    ]
    run = await run_agent(client, task_queue, openai_input())

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2 and fake.remaining == 0
    # The retry sent the same request again.
    assert fake.requests[0].raw == fake.requests[1].raw

    history = await run.handle.fetch_history()
    scheduled: dict[int, str] = {}
    started: list[Any] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started.append(event.activity_task_started_event_attributes)
    assert list(scheduled.values()) == ["call_model"]
    (model_started,) = started
    assert scheduled[model_started.scheduled_event_id] == "call_model"
    assert model_started.attempt == 2
    last_failure = model_started.last_failure
    assert last_failure.application_failure_info.type == "ProviderTransientError"
    assert "HTTP 500" in last_failure.message


async def test_a_missing_key_is_a_configuration_error(
    client: Client, task_queue: str, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    fake.script += [Reply("never sent")]
    run = await run_agent(client, task_queue, openai_input())

    assert run.failure.type == "AgentConfigurationError"
    assert "OPENAI_API_KEY is not set" in run.failure.message
    assert fake.requests == [] and fake.remaining == 1


async def test_a_rate_limit_is_retried_after_the_servers_delay(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        error(
            429,
            "Rate limit reached for gpt-fake-mini",
            type="requests",
            code="rate_limit_exceeded",
            headers={"retry-after": "1"},
        ),
        Reply("Delivered yesterday."),
    ]
    started = time.monotonic()
    run = await run_agent(client, task_queue, openai_input())
    elapsed = time.monotonic() - started

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2 and fake.remaining == 0
    assert elapsed >= 1.0  # the server's one second, not the policy's 50 ms
    (attempt,) = await started_model_attempts(run)
    assert attempt.attempt == 2
    assert attempt.last_failure.application_failure_info.type == "ProviderTransientError"
    assert "HTTP 429" in attempt.last_failure.message


async def test_server_errors_twice_then_success(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        error(500, "The server had an error while processing your request.", type="server_error"),
        error(503, "The engine is currently overloaded", type="server_error"),
        Reply("Delivered yesterday."),
    ]
    run = await run_agent(client, task_queue, openai_input())

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday."
    assert len(fake.requests) == 3 and fake.remaining == 0
    assert len({request.raw for request in fake.requests}) == 1
    (attempt,) = await started_model_attempts(run)
    assert attempt.attempt == 3
    assert "HTTP 503" in attempt.last_failure.message


async def test_a_reply_cut_off_at_the_length_limit_is_retried_then_fails_the_run(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        Reply(tool_calls=[("call_cut", "search_orders", '{"email": "a@')], finish_reason="length")
        for _ in range(3)
    ]
    run = await run_agent(client, task_queue, openai_input())

    assert run.failure.type == "AgentProviderError"
    assert run.failure.message.startswith(
        "model call failed after its retries: ProviderIncompleteReply: "
    )
    assert "cut off at the output-token limit" in run.failure.message
    assert "in the middle of a tool call" in run.failure.message
    assert len(fake.requests) == 3 and fake.remaining == 0
    assert [m.role for m in run.transcript] == ["user"]


async def test_usage_and_cost_totals_for_gpt_4o_mini(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        Reply(
            tool_calls=[("call_search", "search_orders", '{"email": "a@b.com"}')],
            prompt_tokens=1200,
            completion_tokens=20,
            model="gpt-4o-mini-2024-07-18",
        ),
        Reply(
            "Order #1042 was delivered yesterday.",
            prompt_tokens=2000,
            completion_tokens=30,
            cached_tokens=1152,
            model="gpt-4o-mini-2024-07-18",
        ),
    ]
    run = await run_agent(client, task_queue, openai_input(model="gpt-4o-mini"))

    assert run.result is not None, run.error
    usage = run.result.usage
    assert (usage.input_tokens, usage.output_tokens) == (3200, 50)
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (1152, 0)
    price = pricing.SHIPPED_PRICES["gpt-4o-mini"]
    assert (price.input, price.cached_input, price.output) == (0.15, 0.075, 0.60)
    # By hand: uncached input at 0.15, cached input at 0.075, output at 0.60 per million.
    expected = ((3200 - 1152) * 0.15 + 1152 * 0.075 + 50 * 0.60) / 1e6
    assert usage.cost_usd == pytest.approx(expected, abs=1e-12)
    assert usage.cost_usd == pytest.approx(0.0004236, abs=1e-12)
    assert [r.usage.cost_usd for r in run.result.step_records] == [
        pytest.approx((1200 * 0.15 + 20 * 0.60) / 1e6, abs=1e-12),
        pytest.approx((848 * 0.15 + 1152 * 0.075 + 30 * 0.60) / 1e6, abs=1e-12),
    ]
