"""The `openai-responses` provider through the real SDK against the fake's /v1/responses, which
holds the stateless API's rules: reasoning items go back with their encrypted content, each
before the item it preceded, every function_call with its output; the API's 400 when one is
dropped on purpose, its absence in the normal paths (parallel calls, approvals, sub-agents)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

import tests.tools_for_tests as test_tools
from durable_agent.activities import pricing
from durable_agent.activities.providers import openai_responses_provider
from durable_agent.activities.providers._http_errors import (
    INCOMPLETE_REPLY_TYPE,
    TRANSIENT_ERROR_TYPE,
)
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentProviderError
from durable_agent.workflows.inputs import AgentInput, ToolApprovalPolicy
from durable_agent.workflows.model_gateway import model_task_queue
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.transcript import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    UserMessage,
)
from durable_agent.workflows.usage import Usage
from tests import fake_anthropic
from tests.fake_openai import (
    NOT_PERSISTED,
    FakeOpenAI,
    ResponsesReply,
    error,
    responses_error,
    seal,
)
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, run_agent

MODEL = "gpt-5-mini"
SYSTEM = "You are the support agent of a small shop."
TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]
SEARCH = ("call_search", "search_orders", '{"email": "a@b.com"}')
CUSTOMER = ("call_cust", "get_customer", '{"email": "a@b.com"}')
TRACKING = ("call_track", "get_tracking", '{"order_id": 1042}')
ANSWER = "Ada, order #1042 was delivered yesterday."


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def responses_model(**options: Any) -> ModelSettings:
    options.setdefault("model", MODEL)
    options.setdefault("reasoning_effort", "low")
    return ModelSettings(provider="openai-responses", retry=FAST_MODEL_RETRY, **options)


def assert_every_request_valid(fake: FakeOpenAI) -> None:
    for number, request in enumerate(fake.requests, start=1):
        refused = responses_error(request.body)
        assert refused is None, f"request #{number} would be refused: {refused.body}"


async def test_reasoning_goes_back_encrypted_across_parallel_calls(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    fake.script += [
        ResponsesReply(reasoning="Search the orders first.", calls=[SEARCH], cached_tokens=0),
        # A reasoning item before each of two parallel calls, and text before them.
        ResponsesReply(
            items=[
                ("text", "Checking the customer and the parcel."),
                ("reasoning", "The customer first."),
                ("call", CUSTOMER),
                ("reasoning", "Then the parcel."),
                ("call", TRACKING),
            ],
            input_tokens=2000,
            cached_tokens=1024,
            output_tokens=300,
            reasoning_tokens=256,
        ),
        ResponsesReply(ANSWER, reasoning="Delivered: answer."),
    ]
    agent_input = AgentInput(
        prompt="where is order 1042", system=SYSTEM, tools=TOOLS, model=responses_model()
    )
    run = await run_agent(client, task_queue, agent_input)

    assert run.result is not None, run.error
    assert run.result.answer == ANSWER
    assert fake.remaining == 0 and len(fake.requests) == 3
    assert_every_request_valid(fake)
    assert {r.path for r in fake.requests} == {"/v1/responses"}
    first, second, third = (request.body for request in fake.requests)
    # Stateless: nothing kept at OpenAI, the reasoning asked for encrypted, no previous id.
    for body in (first, second, third):
        assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]
        assert "previous_response_id" not in body
        assert body["reasoning"] == {"effort": "low"} and body["instructions"] == SYSTEM
        assert body["parallel_tool_calls"] is True
    assert [t["name"] for t in first["tools"]] == [*TOOLS, "finish"]
    assert first["input"] == [{"role": "user", "content": "where is order 1042"}]
    # The reasoning item goes back exactly as sent, before its call, then the call's output.
    assert [item.get("type") for item in second["input"]] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert second["input"][1]["encrypted_content"].startswith("gAAAA")
    assert second["input"][2] == {
        "type": "function_call",
        "call_id": "call_search",
        "name": "search_orders",
        "arguments": '{"email": "a@b.com"}',
    }
    assert second["input"][3]["call_id"] == "call_search"
    assert third["input"][:4] == second["input"]
    assert [(i.get("type"), i.get("role")) for i in third["input"][4:]] == [
        (None, "assistant"),
        ("reasoning", None),
        ("function_call", None),
        ("reasoning", None),
        ("function_call", None),
        ("function_call_output", None),
        ("function_call_output", None),
    ]
    # Cached and reasoning tokens, priced: reasoning at the output rate, as a part of it.
    second_usage = run.result.step_records[1].usage
    price = pricing.SHIPPED_PRICES[MODEL]
    expected = (976 * price.input + 1024 * price.cached_input + 300 * price.output) / 1e6
    assert second_usage.model_copy(update={"cost_usd": None}) == Usage(
        input_tokens=2000,
        cached_input_tokens=1024,
        output_tokens=300,
        reasoning_tokens=256,
        cost_usd=None,
    )
    assert second_usage.cost_usd == pytest.approx(expected, abs=1e-12)
    assert run.result.usage.reasoning_tokens == sum(
        r.usage.reasoning_tokens for r in run.result.step_records
    )
    # The provider's model calls run on its own task queue.
    history = await run.handle.fetch_history()
    queues = {
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    }
    assert queues == {model_task_queue(task_queue, "openai-responses")}
    assert queues == {f"{task_queue}-model-openai-responses"}


def _open_turn() -> list[Message]:
    """A transcript whose open turn holds a reasoning item the fake made."""
    summary = [{"type": "summary_text", "text": "Search first."}]
    item = {"id": "rs_1", "type": "reasoning", "summary": summary}
    item["encrypted_content"] = seal("rs_1", summary)  # type: ignore[assignment]
    part = openai_responses_provider.ReasoningPart(
        provider="openai-responses",
        api="responses",
        model=MODEL,
        kind="reasoning",
        data=json.dumps(item),
    )
    call = ToolCall(id="call_1", name="search_orders", arguments="{}")
    return [
        UserMessage(content="where is order 1042"),
        AssistantMessage(tool_calls=(call,), reasoning=(part,)),
        ToolResult(tool_call_id="call_1", tool_name="search_orders", content="[]"),
    ]


def _request(messages: list[Message], **settings: Any) -> ModelRequest:
    return ModelRequest(
        settings=responses_model(**settings), system=None, messages=messages, tools=[], step=2
    )


async def test_reasoning_without_its_encrypted_content_gets_the_apis_400(
    fake: FakeOpenAI,
) -> None:
    messages = _open_turn()
    fake.script += [ResponsesReply("fine")]
    assert (await openai_responses_provider.complete(_request(messages))).message.content == "fine"

    part = messages[1].reasoning[0]  # type: ignore[union-attr]
    item = json.loads(part.data)
    del item["encrypted_content"]  # what a transcript that kept only the id would send
    stripped = messages[1].model_copy(
        update={"reasoning": (part.model_copy(update={"data": json.dumps(item)}),)}
    )
    with pytest.raises(AgentProviderError) as refused:
        await openai_responses_provider.complete(_request([messages[0], stripped, messages[2]]))
    assert NOT_PERSISTED.format(id="rs_1") in str(refused.value)
    assert "Items are not persisted when 'store' is set to false" in str(refused.value)


async def test_the_fake_holds_the_stateless_apis_other_rules(fake: FakeOpenAI) -> None:
    params = openai_responses_provider.request_params(_request(_open_turn()))
    assert responses_error(params) is None
    reasoning, call, output = params["input"][1:]
    alone = {**params, "input": [params["input"][0], reasoning, output]}
    assert "without its required following item" in str(responses_error(alone))
    unanswered = {**params, "input": [params["input"][0], reasoning, call]}
    assert "No tool output found for function call call_1." in str(responses_error(unanswered))
    chained = {**params, "previous_response_id": "resp_1"}
    assert "Previous response with id 'resp_1' not found." in str(responses_error(chained))
    changed = {**reasoning, "summary": [{"type": "summary_text", "text": "Other."}]}
    edited = {**params, "input": [params["input"][0], changed, call, output]}
    assert "could not be verified" in str(responses_error(edited))


async def test_another_providers_reasoning_is_left_out(fake: FakeOpenAI) -> None:
    messages = _open_turn()
    thinking = {"type": "thinking", "thinking": "t", "signature": fake_anthropic.signature("t")}
    foreign = (
        messages[1]
        .reasoning[0]
        .model_copy(  # type: ignore[union-attr]
            update={"provider": "anthropic", "api": "messages", "data": json.dumps(thinking)}
        )
    )
    mixed = messages[1].model_copy(update={"reasoning": (foreign,)})
    fake.script += [ResponsesReply("fine")]
    response = await openai_responses_provider.complete(_request([messages[0], mixed, messages[2]]))
    assert response.reasoning_left_out == 1
    assert [i.get("type") for i in fake.requests[-1].body["input"]] == [
        None,
        "function_call",
        "function_call_output",
    ]


async def test_errors_are_classified_as_for_chat_completions(fake: FakeOpenAI) -> None:
    messages = _open_turn()
    fake.script += [
        error(429, "Rate limit reached", type="requests", headers={"retry-after": "2"}),
        error(503, "overloaded", type="server_error"),
        error(400, "Invalid value for 'model'."),
        ResponsesReply(
            items=[("call", ("call_cut", "search_orders", '{"email": "a@'))],
            status="incomplete",
            incomplete_reason="max_output_tokens",
        ),
        ResponsesReply(),
    ]
    with pytest.raises(ApplicationError) as limited:
        await openai_responses_provider.complete(_request(messages))
    assert limited.value.type == TRANSIENT_ERROR_TYPE and not limited.value.non_retryable
    assert limited.value.next_retry_delay is not None
    assert limited.value.next_retry_delay.total_seconds() == 2
    with pytest.raises(ApplicationError) as overloaded:
        await openai_responses_provider.complete(_request(messages))
    assert overloaded.value.type == TRANSIENT_ERROR_TYPE
    with pytest.raises(AgentProviderError, match="HTTP 400: Invalid value for 'model'"):
        await openai_responses_provider.complete(_request(messages))
    with pytest.raises(ApplicationError, match="in the middle of a tool call") as cut:
        await openai_responses_provider.complete(_request(messages))
    assert cut.value.type == INCOMPLETE_REPLY_TYPE
    with pytest.raises(ApplicationError, match="empty reply") as empty:
        await openai_responses_provider.complete(_request(messages))
    assert empty.value.type == INCOMPLETE_REPLY_TYPE


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"temperature": 0.3}, "temperature cannot be set with reasoning_effort"),
        ({"reasoning_effort": "max"}, "not one that openai-responses takes"),
        ({"thinking_budget_tokens": 2048}, "are Anthropic's"),
    ],
)
def test_settings_that_do_not_go_together_are_refused_up_front(
    options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        responses_model(**options)


def test_chat_completions_takes_no_reasoning_effort() -> None:
    with pytest.raises(ValidationError, match="reasoning_effort is for provider"):
        ModelSettings(provider="openai", reasoning_effort="low")


async def test_an_approved_call_keeps_its_turns_reasoning(
    client: Client, task_queue: str, fake: FakeOpenAI
) -> None:
    """The run waits for a person between the reply and its call: the reasoning waits too."""
    test_tools.events.clear()
    fake.script += [
        ResponsesReply(reasoning="Write it.", calls=[("call_w", "write_thing", '{"label": "w"}')]),
        ResponsesReply("written", reasoning="It is done."),
    ]
    agent_input = AgentInput(
        prompt="write w",
        tools=["read_thing", "write_thing"],
        model=responses_model(),
        tool_approval=ToolApprovalPolicy(),
    )
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"approve-{uuid.uuid4()}", task_queue=task_queue
        )
        agent_run = AgentRun(handle, client)
        async for item in agent_run.events():
            if item.data.kind == "approval_requested":
                break
        await agent_run.decide_tool_call("call_w", approve=True)
        result = await agent_run.result()
    assert result.answer == "written"
    assert_every_request_valid(fake)
    assert [i.get("type") for i in fake.requests[1].body["input"]][1:] == [
        "reasoning",
        "function_call",
        "function_call_output",
    ]


async def test_a_sub_agent_on_another_provider_keeps_each_ones_reasoning(
    client: Client, task_queue: str, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parent on Anthropic with thinking delegates to a child on openai-responses: each sends
    its own provider its own reasoning, and neither fake refuses a request."""
    with fake_anthropic.FakeAnthropic() as claude:
        monkeypatch.setenv("ANTHROPIC_API_KEY", claude.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", claude.base_url)
        task = {"task": "Look up order 1042.", "tools": ["get_order"]}
        claude.script += [
            fake_anthropic.Reply(
                thinking="Delegate it.", tool_uses=[("toolu_d", "delegate", task)]
            ),
            fake_anthropic.Reply(ANSWER, thinking="The child found it."),
        ]
        fake.script += [
            ResponsesReply(
                reasoning="Get it.", calls=[("call_o", "get_order", '{"order_id": 1042}')]
            ),
            ResponsesReply("Order 1042: delivered.", reasoning="Report."),
        ]
        agent_input = AgentInput(
            prompt="where is order 1042",
            tools=["get_order"],
            model=ModelSettings(
                provider="anthropic",
                model="claude-fake-sonnet",
                thinking_budget_tokens=1024,
                retry=FAST_MODEL_RETRY,
            ),
            sub_agents=True,
            sub_agent_model=responses_model(),
        )
        run = await run_agent(client, task_queue, agent_input)
        assert run.result is not None, run.error
        assert run.result.answer == ANSWER
        for number, request in enumerate(claude.requests, start=1):
            assert fake_anthropic.request_error(request.body) is None, number
        assert claude.remaining == 0
    assert fake.remaining == 0
    assert_every_request_valid(fake)
    parent_turn = claude.requests[1].body["messages"][1]["content"]
    assert [block["type"] for block in parent_turn] == ["thinking", "tool_use"]
