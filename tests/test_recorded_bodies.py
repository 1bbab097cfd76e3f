"""Bodies recorded from the real OpenAI and Anthropic APIs (tests/recorded/), answered by the fakes
to the real SDKs, met where a user meets them: a run's usage and cost, its transcript, and what
the next request sends back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent.activities.providers import openai_responses_provider
from durable_agent.activities.providers.openai_provider import complete as chat_complete
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.inputs import AgentInput, ModelSettings, Price
from durable_agent.workflows.transcript import AssistantMessage, TextItem, UserMessage
from tests import recorded
from tests.fake_openai import FakeOpenAI, RecordedReply, ResponsesReply
from tests.helpers import FAST_MODEL_RETRY, Run, run_agent

PROMPT = "Reply with exactly: OK"
GPT_5_6 = Price(input=5.0, cached_input=0.5, cache_write=6.25, output=30.0)
"""A price with cache writes at 1.25x input, as GPT-5.6 bills them (its models are not in the
shipped table: a run names its price)."""


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


def settings(provider: str, model: str, **options: Any) -> ModelSettings:
    return ModelSettings(
        provider=provider,  # type: ignore[arg-type]
        model=model,
        retry=FAST_MODEL_RETRY,
        **options,
    )


async def run(client: Client, task_queue: str, model: ModelSettings, prompt: str = PROMPT) -> Run:
    done = await run_agent(client, task_queue, AgentInput(prompt=prompt, tools=[], model=model))
    assert done.result is not None, done.error
    return done


def billed(usage: dict[str, Any], price: Price) -> float:
    """A recorded OpenAI usage at `price`, by hand: input counts the cache reads and writes."""
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    written, read = details.get("cache_write_tokens", 0), details.get("cached_tokens", 0)
    total = usage.get("prompt_tokens", usage.get("input_tokens"))
    output = usage.get("completion_tokens", usage.get("output_tokens"))
    uncached = total - read - written
    dollars = (
        uncached * price.input
        + read * price.cached_input
        + written * price.cache_write
        + output * price.output
    )
    return dollars / 1e6


# --- OpenAI's cache writes ---------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize(
    ("provider", "fixture"),
    [
        ("openai", "openai_chat_gpt_5_6_cache"),
        ("openai-responses", "openai_responses_gpt_5_6_cache"),
    ],
)
async def test_a_gpt_5_6_runs_cache_writes_are_counted_and_priced(
    client: Client, task_queue: str, openai: FakeOpenAI, provider: str, fixture: str, stream: bool
) -> None:
    """The recorded first call of a 4,020-token prompt: 4,012 of it written to the cache, which
    GPT-5.6 bills at 1.25x input. The run's usage counts the writes and its cost prices them."""
    written = recorded.responses(fixture)[0]
    openai.script.append(RecordedReply(written))
    done = await run(
        client, task_queue, settings(provider, "gpt-5.6-sol", price=GPT_5_6, stream=stream)
    )

    assert done.result is not None and done.result.answer == "OK"
    usage = done.result.usage
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (
        4020,
        0,
        4012,
    )
    assert done.result.step_records[0].usage.cache_write_tokens == 4012
    assert usage.cost_usd == pytest.approx(billed(written["usage"], GPT_5_6), abs=1e-12)
    # By hand: 8 uncached, 4,012 written at $6.25, the output at $30 a million.
    assert usage.cost_usd == pytest.approx((8 * 5.0 + 4012 * 6.25 + usage.output_tokens * 30) / 1e6)
    assert openai.remaining == 0


@pytest.mark.parametrize(
    ("provider", "fixture"),
    [
        ("openai", "openai_chat_gpt_5_6_cache"),
        ("openai-responses", "openai_responses_gpt_5_6_cache"),
    ],
)
async def test_the_next_call_reads_what_the_first_wrote(
    openai: FakeOpenAI, provider: str, fixture: str
) -> None:
    read = recorded.responses(fixture)[1]
    openai.script.append(RecordedReply(read))
    request = ModelRequest(
        settings=settings(provider, "gpt-5.6-sol"),
        system=None,
        messages=[UserMessage(content=PROMPT)],
        tools=[],
        step=2,
    )
    complete = chat_complete if provider == "openai" else openai_responses_provider.complete
    response = await complete(request)

    assert (response.usage.cached_input_tokens, response.usage.cache_write_tokens) == (4012, 0)
    assert response.usage.input_tokens == 4020


# --- the Responses API's phase ------------------------------------------------------------------

COMMENTARY = 'I\'ll check the capital lookup tool for "PotatoLand."'
FINAL = "The capital of PotatoLand is **Potato City**."


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
async def test_an_assistant_message_goes_back_with_its_phase(
    client: Client, task_queue: str, openai: FakeOpenAI, stream: bool
) -> None:
    """gpt-5.5's recorded turn: reasoning, a message with phase "commentary", a call. The next
    request sends the message back with its phase, as OpenAI asks, beside the reasoning item
    exactly as it came; the answer's "final_answer" is kept for the turn after."""
    asked, answered = recorded.responses("openai_responses_phase")
    openai.script += [RecordedReply(asked), RecordedReply(answered)]
    done = await run(
        client,
        task_queue,
        settings("openai-responses", "gpt-5.5", reasoning_effort="medium", stream=stream),
        prompt="What is the capital of PotatoLand?",
    )

    assert done.result is not None and done.result.answer == FINAL
    assert openai.phases_dropped == []
    sent_back = openai.requests[1].body["input"]
    reasoning, _, call = asked["output"]
    assert sent_back[1] == reasoning  # every field as the API sent it
    assert sent_back[2] == {"role": "assistant", "content": COMMENTARY, "phase": "commentary"}
    assert sent_back[3] == {
        "type": "function_call",
        "call_id": call["call_id"],
        "name": call["name"],
        "arguments": call["arguments"],
    }
    # What pydantic-ai sent back when it recorded this turn, and the real API answered: the same
    # text with the same phase (its ids and statuses are its own: this stateless request has none).
    theirs = recorded.load("openai_responses_phase")["requests"]["1"]["input"][2]
    assert (theirs["phase"], theirs["content"][0]["text"]) == ("commentary", COMMENTARY)

    # The transcript keeps each message's phase, so the answer's goes back on the next turn too.
    said, answer = done.transcript[1], done.transcript[-1]
    assert isinstance(said, AssistantMessage) and isinstance(answer, AssistantMessage)
    assert said.text_items == (
        TextItem(
            provider="openai-responses",
            api="responses",
            chars=len(COMMENTARY),
            fields='{"phase":"commentary"}',
        ),
    )
    next_turn = ModelRequest(
        settings=settings("openai-responses", "gpt-5.5"),
        system=None,
        messages=[*done.transcript, UserMessage(content="And its population?")],
        tools=[],
        step=3,
    )
    items = openai_responses_provider.request_params(next_turn)["input"]
    assert {"role": "assistant", "content": FINAL, "phase": "final_answer"} in items


async def test_a_message_without_a_phase_keeps_its_bytes(openai: FakeOpenAI) -> None:
    """A model that labels nothing: the message has no text items, and its JSON is as before."""
    openai.script.append(ResponsesReply("plain"))
    request = ModelRequest(
        settings=settings("openai-responses", "gpt-5-mini"),
        system=None,
        messages=[UserMessage(content="hi")],
        tools=[],
        step=1,
    )
    response = await openai_responses_provider.complete(request)

    assert response.message.text_items == ()
    assert (
        response.message.model_dump_json()
        == '{"role":"assistant","content":"plain","tool_calls":[]}'
    )


async def test_the_phase_of_each_message_item_goes_back_with_its_own_text(
    openai: FakeOpenAI,
) -> None:
    """Two message items in one reply, each with its phase: one text in the transcript, two
    items again on the way back, each with its own."""
    openai.script.append(
        ResponsesReply(items=[("text", "Looking. "), ("text", "Found it.")], phase="commentary")
    )
    request = ModelRequest(
        settings=settings("openai-responses", "gpt-5.5"),
        system=None,
        messages=[UserMessage(content="hi")],
        tools=[],
        step=1,
    )
    reply = (await openai_responses_provider.complete(request)).message
    assert reply.content == "Looking. Found it."
    first, second = reply.text_items
    changed = reply.model_copy(
        update={
            "text_items": (first, second.model_copy(update={"fields": '{"phase":"final_answer"}'}))
        }
    )
    items = openai_responses_provider.to_input_items([UserMessage(content="hi"), changed])[0]
    assert items[1:] == [
        {"role": "assistant", "content": "Looking. ", "phase": "commentary"},
        {"role": "assistant", "content": "Found it.", "phase": "final_answer"},
    ]


async def test_a_gpt_5_6_reasoning_item_goes_back_whole(
    client: Client, task_queue: str, openai: FakeOpenAI
) -> None:
    """gpt-5.6's recorded reasoning item carries `content: []` beside its encrypted content: it
    goes back with every field, and the fake, like the API, takes only the item it sent."""
    thought = recorded.responses("openai_responses_gpt_5_6_reasoning_call")[0]
    openai.script += [RecordedReply(thought), ResponsesReply("done")]
    done = await run(client, task_queue, settings("openai-responses", "gpt-5.6-sol"))

    assert done.result is not None and done.result.answer == "done"
    reasoning, call = thought["output"]
    sent_back = openai.requests[1].body["input"]
    assert sent_back[1] == reasoning
    assert sent_back[2]["call_id"] == call["call_id"] and sent_back[3]["call_id"] == call["call_id"]
    assert (
        done.result.usage.reasoning_tokens
        == thought["usage"]["output_tokens_details"]["reasoning_tokens"]
    )
