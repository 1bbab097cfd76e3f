"""The whole loop with a real provider SDK: AgentWorkflow on the real dev server, the real
`openai` or `anthropic` SDK in the model activity, and the local fake of that provider's API
(tests/fake_openai.py, tests/fake_anthropic.py) behind it.

Each scenario is written once and runs for both providers: a provider (`OpenAI`, `Anthropic`)
gives its name, its fake, its environment variables and its wire format (how a reply or an error
is scripted, how the requests sent are read). What only one provider has (Anthropic's cache
breakpoints, OpenAI's dated model names in the price table) is a test for that provider alone:
marked `@only(...)` when it runs the loop, named after the provider when it does not."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

import tests.tools_for_tests as test_tools
from durable_agent.activities import pricing
from durable_agent.workflows.compaction import SUMMARY_SYSTEM
from durable_agent.workflows.decisions import ApprovalCriteria
from durable_agent.workflows.inputs import AgentInput, AutoMode, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.usage import Usage
from tests import fake_anthropic, fake_openai
from tests.helpers import FAST_MODEL_RETRY, Run, run_agent
from tests.test_anthropic_adapter import cache_paths

PROMPT = "where is order 1042"
SYSTEM = "You are the support agent of a small shop. Answer from the tools' data only."
DEMO_TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]
EPHEMERAL = {"type": "ephemeral"}

Fake = fake_openai.FakeOpenAI | fake_anthropic.FakeAnthropic
Call = tuple[str, str, dict[str, Any]]
"""(id, tool name, arguments) of one tool call, in either wire format."""


@dataclass
class Result:
    """One tool result as a request carried it."""

    id: str
    content: str
    error_flag: bool | None
    """The wire's own error mark; None when the result has none (OpenAI never has one)."""


class OpenAI:
    """A provider as the scenarios need it: the fake and its environment, the replies and
    errors to script, and readers of the requests sent (`Anthropic` answers the same names)."""

    name = "openai"
    model = "gpt-fake-mini"
    """The scenarios' model: not in the price table, so a run's cost is unknown."""
    key_variable, base_url_variable = "OPENAI_API_KEY", "OPENAI_BASE_URL"
    wrong_key, wrong_key_says = "sk-wrong-key-1234", "Incorrect API key provided"
    error_flag = None
    """The mark of a failed tool's result on the wire."""
    output_limit = "max_output_tokens not set: the model's own limit"
    """How a reply cut off at the output-token limit names the limit of a run that sets none."""
    refused_says = "Invalid value for 'model': the model does not exist."
    refused = fake_openai.error(400, refused_says)
    server_error = fake_openai.error(
        500, "The server had an error while processing your request.", type="server_error"
    )
    overloaded_status = 503
    overloaded = fake_openai.error(503, "The engine is currently overloaded", type="server_error")
    rate_limited = fake_openai.error(
        429,
        "Rate limit reached for gpt-fake-mini",
        type="requests",
        code="rate_limit_exceeded",
        headers={"retry-after": "1"},
    )

    def serve(self) -> Fake:
        return fake_openai.FakeOpenAI()

    def reply(self, text: str | None = None, calls: Sequence[Call] = (), **wire: Any) -> Any:
        """A scripted assistant reply; `wire` sets the provider's own fields (usage, say)."""
        tool_calls = [(id, name, json.dumps(arguments)) for id, name, arguments in calls]
        return fake_openai.Reply(text, tool_calls=tool_calls, **wire)

    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        """`usage` as the provider reports it, in the fields of `reply`."""
        # prompt_tokens counts every input token, cache reads and writes included (writes are
        # reported from GPT-5.6 on; left out before, as None leaves them).
        return {
            "prompt_tokens": usage.input_tokens,
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": usage.cache_write_tokens or None,
            "completion_tokens": usage.output_tokens,
        }

    def empty_reply(self) -> Any:
        return fake_openai.Reply()

    def cut_off_reply(self) -> Any:
        """A reply stopped by the output-token limit in the middle of a tool call."""
        cut = ("call_cut", "search_orders", '{"email": "a@')
        return fake_openai.Reply(tool_calls=[cut], finish_reason="length")

    def refusal(self, body: dict[str, Any]) -> Any:
        """The 400 the real API would answer `body` with; None when it would accept it."""
        return fake_openai.pairing_error(body["messages"])

    def sent_key(self, headers: dict[str, str]) -> str:
        scheme, key = headers["authorization"].split(" ", 1)
        assert scheme == "Bearer", headers["authorization"]
        return key

    def system(self, body: dict[str, Any]) -> str | None:
        first = body["messages"][0]
        return first["content"] if first["role"] == "system" else None

    def conversation(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The messages of a request after any system prompt."""
        messages: list[dict[str, Any]] = body["messages"]
        return messages[1:] if messages[0]["role"] == "system" else messages

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [tool["function"]["name"] for tool in body["tools"]]

    def user(self, text: str) -> dict[str, Any]:
        """The message of a user's text, as sent, without cache marks."""
        return {"role": "user", "content": text}

    def assistant(self, text: str | None, calls: Sequence[Call]) -> dict[str, Any]:
        """An assistant message as sent back to the API: exactly these keys."""
        tool_calls = [
            {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(a)}}
            for id, name, a in calls
        ]
        return {"role": "assistant", "content": text, "tool_calls": tool_calls}

    def results(self, messages: list[dict[str, Any]]) -> list[Result]:
        """The results of one step's tool calls: `messages` must hold them and nothing else."""
        # One tool message per result, and nothing else in it: the API has no error flag.
        assert all(set(m) == {"role", "tool_call_id", "content"} for m in messages), messages
        assert all(m["role"] == "tool" for m in messages), messages
        return [Result(m["tool_call_id"], m["content"], None) for m in messages]

    def without_cache_marks(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return messages  # OpenAI caches a request's prefix unmarked


class Anthropic:
    name = "anthropic"
    model = "claude-fake-sonnet"
    key_variable, base_url_variable = "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"
    wrong_key, wrong_key_says = "sk-ant-wrong-1234", "invalid x-api-key"
    error_flag = True
    output_limit = "max_output_tokens=4096"  # the Messages API requires a max_tokens
    refused_says = "max_tokens: 100000 > 64000, which is the maximum allowed for this model"
    refused = fake_anthropic.error(400, refused_says)
    server_error = fake_anthropic.error(500, "Internal server error", type="api_error")
    overloaded_status = 529
    overloaded = fake_anthropic.error(529, "Overloaded", type="overloaded_error")
    rate_limited = fake_anthropic.error(
        429,
        "Number of request tokens has exceeded your per-minute rate limit",
        type="rate_limit_error",
        headers={"retry-after": "1"},
    )

    def serve(self) -> Fake:
        return fake_anthropic.FakeAnthropic()

    def reply(self, text: str | None = None, calls: Sequence[Call] = (), **wire: Any) -> Any:
        return fake_anthropic.Reply(text, tool_uses=list(calls), **wire)

    def usage_fields(self, usage: Usage) -> dict[str, Any]:
        # input_tokens counts only the uncached input; reads and writes are counted apart.
        uncached = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens
        return {
            "input_tokens": uncached,
            "cache_read_input_tokens": usage.cached_input_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "output_tokens": usage.output_tokens,
        }

    def empty_reply(self) -> Any:
        return fake_anthropic.Reply(content=[])

    def cut_off_reply(self) -> Any:
        cut = ("toolu_cut", "search_orders", {})
        return fake_anthropic.Reply(
            "Let me look that up.", tool_uses=[cut], stop_reason="max_tokens"
        )

    def refusal(self, body: dict[str, Any]) -> Any:
        return fake_anthropic.request_error(body)

    def sent_key(self, headers: dict[str, str]) -> str:
        key = fake_anthropic.sent_key(headers)
        assert key is not None, headers
        return key

    def system(self, body: dict[str, Any]) -> str | None:
        (block,) = body["system"]
        return str(block["text"])

    def conversation(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = body["messages"]
        return messages

    def tool_names(self, body: dict[str, Any]) -> list[str]:
        return [tool["name"] for tool in body["tools"]]

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "text", "text": text}]}

    def assistant(self, text: str | None, calls: Sequence[Call]) -> dict[str, Any]:
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in calls]
        return {"role": "assistant", "content": blocks}

    def results(self, messages: list[dict[str, Any]]) -> list[Result]:
        # Every result of a step in one user turn, in call order.
        (turn,) = messages
        assert turn["role"] == "user", turn
        allowed = {"type", "tool_use_id", "content", "is_error", "cache_control"}
        assert all(b["type"] == "tool_result" and set(b) <= allowed for b in turn["content"])
        return [Result(b["tool_use_id"], b["content"], b.get("is_error")) for b in turn["content"]]

    def without_cache_marks(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        messages = copy.deepcopy(messages)
        for message in messages:
            for block in message["content"]:
                block.pop("cache_control", None)
        return messages


Provider = OpenAI | Anthropic
OPENAI, ANTHROPIC = OpenAI(), Anthropic()


def only(provider: Provider) -> pytest.MarkDecorator:
    """A scenario of one provider's own: the test runs for that provider alone."""
    return pytest.mark.parametrize("provider", [provider], ids=[provider.name])


@pytest.fixture(params=[OPENAI, ANTHROPIC], ids=lambda provider: provider.name)
def provider(request: pytest.FixtureRequest) -> Provider:
    result: Provider = request.param
    return result


@pytest.fixture
def fake(provider: Provider, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    """An empty fake with the worker's environment pointing at it; tests fill its script."""
    with provider.serve() as server:
        monkeypatch.setenv(provider.key_variable, server.api_key)
        monkeypatch.setenv(provider.base_url_variable, server.base_url)
        yield server


def agent_input(provider: Provider, **options: Any) -> AgentInput:
    return AgentInput(
        prompt=options.pop("prompt", PROMPT),
        tools=options.pop("tools", DEMO_TOOLS),
        model=ModelSettings(
            provider=provider.name,
            model=options.pop("model", provider.model),
            retry=FAST_MODEL_RETRY,
        ),
        **options,
    )


def assert_every_request_valid(provider: Provider, fake: Fake) -> None:
    for number, request in enumerate(fake.requests, start=1):
        assert provider.refusal(request.body) is None, f"request #{number} would be refused"


async def activities_of(run: Run) -> tuple[dict[int, str], list[Any]]:
    """The run's scheduled activities by event id, and its ActivityTaskStarted attributes."""
    history = await run.handle.fetch_history()
    scheduled: dict[int, str] = {}
    started = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started.append(event.activity_task_started_event_attributes)
    return scheduled, started


async def started_model_attempts(run: Run) -> list[Any]:
    """The ActivityTaskStarted attributes of the run's call_model activities."""
    scheduled, started = await activities_of(run)
    return [s for s in started if scheduled.get(s.scheduled_event_id) == "call_model"]


# --- the demo run: three steps over the demo tools ---------------------------------------------

SEARCH: Call = ("call_search", "search_orders", {"email": "a@b.com"})
CUSTOMER: Call = ("call_cust", "get_customer", {"email": "a@b.com"})
TRACKING: Call = ("call_track", "get_tracking", {"order_id": 1042})
CHECKING = "Found order 1042; checking the customer and the parcel."
ANSWER = "Ada, order #1042 was delivered yesterday at 14:20 UTC."


def demo_script(provider: Provider, wire: list[dict[str, Any]]) -> list[Any]:
    """One call, then two in parallel with text beside them, then the answer; `wire` gives
    each reply's provider fields."""
    return [
        provider.reply(calls=[SEARCH], **wire[0]),
        provider.reply(CHECKING, calls=[CUSTOMER, TRACKING], **wire[1]),
        provider.reply(ANSWER, **wire[2]),
    ]


async def test_multi_step_run_over_the_demo_tools(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    steps = [
        Usage(input_tokens=300, output_tokens=20),
        Usage(input_tokens=700, output_tokens=40, cached_input_tokens=256),
        Usage(input_tokens=1100, output_tokens=25, cached_input_tokens=640),
    ]
    fake.script += demo_script(provider, [provider.usage_fields(usage) for usage in steps])
    run = await run_agent(client, task_queue, agent_input(provider, system=SYSTEM))

    assert run.result is not None, run.error
    assert run.result.answer == ANSWER and run.result.steps == 3
    # Input counts every input token, the cached ones included, whatever the wire's split; the
    # scenario's model has no price: an unknown cost is None, not zero.
    assert run.result.usage == Usage(
        input_tokens=2100, output_tokens=85, cached_input_tokens=896, cost_usd=None
    )
    assert [r.usage.input_tokens for r in run.result.step_records] == [300, 700, 1100]
    assert [r.usage.cached_input_tokens for r in run.result.step_records] == [0, 256, 640]
    assert {r.model for r in run.result.step_records} == {provider.model}
    assert fake.remaining == 0 and len(fake.requests) == 3
    assert_every_request_valid(provider, fake)

    first, second, third = (request.body for request in fake.requests)
    assert first["model"] == provider.model
    assert provider.system(first) == SYSTEM
    assert provider.tool_names(first) == [*DEMO_TOOLS, "finish"]
    assert provider.without_cache_marks(provider.conversation(first)) == [provider.user(PROMPT)]

    # Request 2: the call, then its result with the real rows from SQLite.
    second_messages = provider.conversation(second)
    assert len(second_messages) == 3
    assert second_messages[1] == provider.assistant(None, [SEARCH])
    (search,) = provider.results(second_messages[2:])
    assert search.id == "call_search" and search.error_flag is None
    rows = json.loads(search.content)
    assert rows["total_orders"] == 3 and rows["orders"][0]["id"] == 1042

    # Request 3: request 2 as its prefix (the prompt cache; only Anthropic's moving breakpoint
    # differs), then both parallel calls in one assistant message with the text beside them,
    # and one result per call id, in call order.
    third_messages = provider.conversation(third)
    assert provider.system(third) == SYSTEM and third.get("tools") == second.get("tools")
    assert provider.without_cache_marks(third_messages[:3]) == provider.without_cache_marks(
        second_messages
    )
    assert third_messages[3] == provider.assistant(CHECKING, [CUSTOMER, TRACKING])
    customer, tracking = provider.results(third_messages[4:])
    assert (customer.id, tracking.id) == ("call_cust", "call_track")
    assert customer.error_flag is None and tracking.error_flag is None
    assert json.loads(customer.content)["name"] == "Ada Byron"
    parcel = json.loads(tracking.content)
    assert parcel["order_id"] == 1042 and "14:20" in parcel["summary"]
    assert not any(r.is_error for r in run.transcript if r.role == "tool")


@only(ANTHROPIC)
async def test_anthropic_cache_breakpoints_and_the_cost_of_cache_reads_and_writes(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    """The demo run on a priced model: a breakpoint on the system prompt, on the last tool and
    on the last block of the conversation, which moves as it grows; reads and writes priced."""
    model = "claude-sonnet-4-6"
    # Per reply: uncached input, cache reads, cache writes, output.
    steps = [(500, 0, 1200, 30), (80, 1200, 400, 45), (60, 1600, 300, 25)]
    wire = [
        {
            "input_tokens": uncached,
            "cache_read_input_tokens": reads,
            "cache_creation_input_tokens": writes,
            "output_tokens": output,
        }
        for uncached, reads, writes, output in steps
    ]
    fake.script += demo_script(provider, wire)
    run = await run_agent(client, task_queue, agent_input(provider, model=model, system=SYSTEM))

    assert run.result is not None, run.error
    assert run.result.answer == ANSWER
    assert fake.remaining == 0 and len(fake.requests) == 3
    assert_every_request_valid(provider, fake)  # four breakpoints at most

    # Usage: input counts every input token, cache reads and writes included.
    usage = run.result.usage
    assert (usage.input_tokens, usage.output_tokens) == (1700 + 1680 + 1960, 100)
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (2800, 1900)
    assert [r.usage.cached_input_tokens for r in run.result.step_records] == [0, 1200, 1600]
    assert [r.usage.cache_write_tokens for r in run.result.step_records] == [1200, 400, 300]
    assert {r.model for r in run.result.step_records} == {model}
    # Cost by hand from the claude-sonnet-4-6 list price ($ per million tokens).
    price = pricing.SHIPPED_PRICES[model]
    list_price = (price.input, price.cached_input, price.cache_write, price.output)
    assert list_price == (3.0, 0.30, 3.75, 15.0)
    uncached = (500 + 80 + 60) * 3.0
    reads = (1200 + 1600) * 0.30
    writes = (1200 + 400 + 300) * 3.75
    output = (30 + 45 + 25) * 15.0
    assert usage.cost_usd == pytest.approx((uncached + reads + writes + output) / 1e6, abs=1e-12)
    assert usage.cost_usd == pytest.approx(0.011385, abs=1e-12)

    first, second, third = (request.body for request in fake.requests)
    assert first["model"] == model and first["max_tokens"] == 4096
    assert first["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    assert [("cache_control" in tool) for tool in first["tools"]] == [False] * 4 + [True]
    assert first["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": PROMPT, "cache_control": EPHEMERAL}]}
    ]
    # The breakpoint moves to the last tool result; the blocks before it carry none.
    (result,) = second["messages"][2]["content"]
    assert result["cache_control"] == EPHEMERAL
    assert "cache_control" not in second["messages"][0]["content"][0]
    assert third["tools"] == second["tools"] and third["system"] == second["system"]
    results = third["messages"][4]["content"]
    assert "cache_control" not in results[0] and results[1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in third["messages"][2]["content"][0]


@only(ANTHROPIC)
async def test_anthropic_one_off_requests_carry_no_cache_breakpoint(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    """A judge's verdict and a compaction's summary are sent once: no later call reads their
    prefix, so a breakpoint would only write a cache at 1.25x the input. The loop's own calls,
    whose prefix the next step reads, keep theirs."""
    test_tools.events.clear()
    verdict = {"decision": "approve", "confidence": 0.95, "reason": "a draft"}
    fake.script += [
        # About 1,500 tokens: the next step's request stays under the limit, the one after not.
        provider.reply(calls=[("toolu_big", "blob", {"size": 6000})]),
        provider.reply(
            calls=[
                ("toolu_more", "blob", {"size": 2400}),
                ("toolu_write", "write_thing", {"label": "draft-1"}),
            ]
        ),
        provider.reply(calls=[("toolu_verdict", "verdict", verdict)]),  # the judge
        provider.reply("Read a blob of 6,000 characters."),  # the summary
        provider.reply("done"),
    ]
    judge = ModelSettings(provider="anthropic", model="claude-judge", retry=FAST_MODEL_RETRY)
    approval = ToolApprovalPolicy(
        auto_mode=AutoMode(
            judge=judge,
            criteria={"writes": ApprovalCriteria(effect="writes", approve_when="a draft")},
            tools={"write_thing": "writes"},
        )
    )
    run = await run_agent(
        client,
        task_queue,
        agent_input(
            provider,
            system=SYSTEM,
            tools=["blob", "write_thing"],
            tool_approval=approval,
            compaction="summary",
            limits=Limits(max_context_tokens=2300),
        ),
    )

    assert run.result is not None, run.error
    assert run.result.answer == "done" and fake.remaining == 0
    assert [c.policy for c in run.result.compactions] == ["summary"]
    assert [label for kind, label in test_tools.events if kind == "start"] == ["draft-1"]
    assert_every_request_valid(provider, fake)
    bodies = [request.body for request in fake.requests]
    judged = [b for b in bodies if [t["name"] for t in b.get("tools", ())] == ["verdict"]]
    summarised = [b for b in bodies if b["system"][0]["text"] == SUMMARY_SYSTEM]
    steps = [b for b in bodies if b not in judged and b not in summarised]
    assert (len(judged), len(summarised), len(steps)) == (1, 1, 3)
    assert cache_paths(judged[0]) == [] and cache_paths(summarised[0]) == []
    for body in steps:
        last = len(body["messages"]) - 1
        assert sorted(cache_paths(body)) == [
            f"messages[{last}].content[{len(body['messages'][last]['content']) - 1}]",
            "system[0]",
            f"tools[{len(body['tools']) - 1}]",
        ]


def test_anthropic_usage_of_one_call_is_priced_like_the_run() -> None:
    """Anthropic only: the neutral usage of one Anthropic call, whose input includes cache reads
    and writes, costs the uncached part at the input price."""
    one = Usage(input_tokens=1700, output_tokens=30, cache_write_tokens=1200)
    price = pricing.price_for("claude-sonnet-4-6")
    assert pricing.cost_usd(one, price) == pytest.approx(
        (500 * 3.0 + 1200 * 3.75 + 30 * 15.0) / 1e6, abs=1e-12
    )


@only(OPENAI)
async def test_openai_usage_and_cost_totals_for_gpt_4o_mini(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    """A dated model name in the reply is priced as its family in the price table."""
    fake.script += [
        fake_openai.Reply(
            tool_calls=[("call_search", "search_orders", '{"email": "a@b.com"}')],
            prompt_tokens=1200,
            completion_tokens=20,
            model="gpt-4o-mini-2024-07-18",
        ),
        fake_openai.Reply(
            "Order #1042 was delivered yesterday.",
            prompt_tokens=2000,
            completion_tokens=30,
            cached_tokens=1152,
            model="gpt-4o-mini-2024-07-18",
        ),
    ]
    run = await run_agent(client, task_queue, agent_input(provider, model="gpt-4o-mini"))

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


# --- tool errors -------------------------------------------------------------------------------


async def test_tool_errors_go_back_to_the_model_under_their_ids(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [
        provider.reply(
            calls=[
                ("call_bad_args", "get_order", {"order_id": "abc"}),
                ("call_no_tool", "lookup_weather", {"city": "Paris"}),
                ("call_ok", "get_order", {"order_id": 1042}),
            ]
        ),
        provider.reply("I could not look everything up."),
    ]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.result is not None, run.error
    assert run.result.answer == "I could not look everything up." and run.result.steps == 2
    assert fake.remaining == 0 and len(fake.requests) == 2
    assert_every_request_valid(provider, fake)

    results = provider.results(provider.conversation(fake.requests[1].body)[2:])
    assert [(r.id, r.error_flag) for r in results] == [
        ("call_bad_args", provider.error_flag),
        ("call_no_tool", provider.error_flag),
        ("call_ok", None),
    ]
    assert results[0].content.startswith("Error: invalid arguments for get_order")
    assert "order_id: Input should be a valid integer" in results[0].content
    assert results[1].content.startswith("Error: no tool named 'lookup_weather'.")
    assert "get_order" in results[1].content
    assert json.loads(results[2].content)["id"] == 1042
    outcomes = [(c.id, c.outcome) for c in run.result.step_records[0].tool_calls]
    assert outcomes == [("call_bad_args", "error"), ("call_no_tool", "error"), ("call_ok", "ok")]


# --- refusals: the run ends at once ------------------------------------------------------------


async def test_a_provider_400_ends_the_run_without_retries(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [provider.refused]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.failure.type == "AgentProviderError"
    assert run.failure.non_retryable
    assert "HTTP 400" in run.failure.message and provider.refused_says in run.failure.message
    # A retry would have reached the exhausted script and been recorded as a second request.
    assert len(fake.requests) == 1
    assert run.failure.details[0]["steps"] == 0


async def test_a_wrong_key_ends_the_run_after_one_request_and_names_the_variable(
    client: Client,
    task_queue: str,
    provider: Provider,
    fake: Fake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(provider.key_variable, provider.wrong_key)
    fake.script += [provider.reply("never sent")]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.failure.type == "AgentProviderError"
    assert run.failure.non_retryable
    assert "HTTP 401" in run.failure.message and provider.key_variable in run.failure.message
    assert provider.wrong_key_says in run.failure.message
    assert len(fake.requests) == 1 and fake.remaining == 1
    assert provider.sent_key(fake.requests[0].headers) == provider.wrong_key
    assert run.failure.details[0]["steps"] == 0


async def test_a_missing_key_is_a_configuration_error(
    client: Client,
    task_queue: str,
    provider: Provider,
    fake: Fake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(provider.key_variable)
    fake.script += [provider.reply("never sent")]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.failure.type == "AgentConfigurationError"
    assert f"{provider.key_variable} is not set" in run.failure.message
    assert fake.requests == [] and fake.remaining == 1


# --- transient failures: Temporal retries the model call ---------------------------------------


async def test_a_server_error_is_retried_as_the_same_activity(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [provider.server_error, provider.reply("Delivered yesterday.")]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2 and fake.remaining == 0
    # The retry sent the same request again.
    assert fake.requests[0].raw == fake.requests[1].raw

    # One activity, started once more: the history keeps the last attempt and its cause.
    scheduled, started = await activities_of(run)
    assert list(scheduled.values()) == ["call_model"]
    (model_started,) = started
    assert scheduled[model_started.scheduled_event_id] == "call_model"
    assert model_started.attempt == 2
    last_failure = model_started.last_failure
    assert last_failure.application_failure_info.type == "ProviderTransientError"
    assert "HTTP 500" in last_failure.message


async def test_server_errors_twice_then_success(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [provider.server_error, provider.overloaded]
    fake.script += [provider.reply("Delivered yesterday.")]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday."
    assert len(fake.requests) == 3 and fake.remaining == 0
    assert len({request.raw for request in fake.requests}) == 1
    (attempt,) = await started_model_attempts(run)
    assert attempt.attempt == 3
    assert f"HTTP {provider.overloaded_status}" in attempt.last_failure.message


async def test_a_rate_limit_is_retried_after_the_servers_delay(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [provider.rate_limited, provider.reply("Delivered yesterday.")]
    started = time.monotonic()
    run = await run_agent(client, task_queue, agent_input(provider))
    elapsed = time.monotonic() - started

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2 and fake.remaining == 0
    assert fake.requests[0].raw == fake.requests[1].raw
    assert elapsed >= 1.0  # the server's one second, not the policy's 50 ms
    (attempt,) = await started_model_attempts(run)
    assert attempt.attempt == 2
    assert attempt.last_failure.application_failure_info.type == "ProviderTransientError"
    assert "HTTP 429" in attempt.last_failure.message


async def test_an_empty_reply_is_retried(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [provider.empty_reply(), provider.reply("Delivered yesterday.")]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.result is not None, run.error
    assert run.result.answer == "Delivered yesterday." and run.result.steps == 1
    assert len(fake.requests) == 2
    (attempt,) = await started_model_attempts(run)
    assert attempt.last_failure.application_failure_info.type == "ProviderIncompleteReply"


async def test_a_reply_cut_off_at_the_output_limit_is_retried_then_fails_the_run(
    client: Client, task_queue: str, provider: Provider, fake: Fake
) -> None:
    fake.script += [provider.cut_off_reply() for _ in range(3)]
    run = await run_agent(client, task_queue, agent_input(provider))

    assert run.failure.type == "AgentProviderError"
    assert run.failure.message.startswith(
        "model call failed after its retries: ProviderIncompleteReply: "
    )
    assert (
        f"the reply was cut off at the output-token limit ({provider.output_limit}) "
        "in the middle of a tool call"
    ) in run.failure.message
    # The model retry policy's three attempts, and nothing was appended to the transcript.
    assert len(fake.requests) == 3 and fake.remaining == 0
    assert [m.role for m in run.transcript] == ["user"]
