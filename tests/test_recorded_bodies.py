"""Bodies recorded from the real OpenAI and Anthropic APIs (tests/recorded/), answered by the fakes
to the real SDKs, met where a user meets them: a run's usage and cost, its transcript, and what
the next request sends back. Every field of every recorded body is read (and checked here) or
named as left, with the reason: a field a newer body brings fails the last test until someone
decides which it is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from durable_agent.activities.providers import openai_responses_provider
from durable_agent.activities.providers.anthropic_provider import complete as anthropic_complete
from durable_agent.activities.providers.openai_provider import complete as chat_complete
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings, Price
from durable_agent.workflows.transcript import AssistantMessage, TextItem, UserMessage
from durable_agent.workflows.usage import Usage
from tests import fake_anthropic, recorded
from tests.fake_openai import FakeOpenAI, RecordedReply, ResponsesReply, responses_error
from tests.helpers import FAST_MODEL_RETRY, Run, run_agent

PROMPT = "Reply with exactly: OK"
GPT_5_6 = Price(input=5.0, cached_input=0.5, cache_write=6.25, output=30.0)
"""A price with cache writes at 1.25x input, as GPT-5.6 bills them (its models are not in the
shipped table: a run names its price)."""


def asking(model: str) -> ModelRequest:
    """A first request to the Responses API: "hi", with no tools."""
    return ModelRequest(
        settings=settings("openai-responses", model),
        system=None,
        messages=[UserMessage(content="hi")],
        tools=[],
        step=1,
    )


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
    response = await openai_responses_provider.complete(asking("gpt-5-mini"))

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
    reply = (await openai_responses_provider.complete(asking("gpt-5.5"))).message
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


# --- Anthropic ----------------------------------------------------------------------------------


async def test_a_signed_thinking_block_goes_back_as_it_came(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    asked, answered = recorded.responses("anthropic_thinking_tool_use")
    claude.script += [fake_anthropic.RecordedReply(asked), fake_anthropic.RecordedReply(answered)]
    done = await run(
        client,
        task_queue,
        settings("anthropic", "claude-sonnet-4-20250514", thinking_budget_tokens=1024),
        prompt="What is the largest city in the user country?",
    )

    assert done.result is not None
    assert done.result.answer == answered["content"][0]["text"]
    thinking, text, call = asked["content"]
    turn = claude.requests[1].body["messages"][1]
    assert turn["role"] == "assistant"
    assert turn["content"] == [
        thinking,
        text,
        {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["input"]},
    ]


async def test_anthropic_cache_reads_and_writes_are_counted_and_priced(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    body = recorded.responses("anthropic_cache")[1]
    claude.script.append(fake_anthropic.RecordedReply(body))
    done = await run(client, task_queue, settings("anthropic", "claude-sonnet-4-5"))

    assert done.result is not None
    usage = done.result.usage
    # Anthropic counts its cache apart from input_tokens; the run counts every input token.
    assert (usage.input_tokens, usage.cached_input_tokens, usage.cache_write_tokens) == (
        3 + 1111 + 418,
        1111,
        418,
    )
    assert usage.cost_usd == pytest.approx((3 * 3.0 + 1111 * 0.30 + 418 * 3.75 + 33 * 15.0) / 1e6)


async def test_anthropic_thinking_tokens_are_read(claude: fake_anthropic.FakeAnthropic) -> None:
    body = recorded.responses("anthropic_opus_5_thinking")[0]
    claude.script.append(fake_anthropic.RecordedReply(body))
    request = ModelRequest(
        settings=settings("anthropic", "claude-opus-5", adaptive_thinking=True),
        system=None,
        messages=[UserMessage(content="What is 2+2?")],
        tools=[],
        step=1,
    )
    response = await anthropic_complete(request)

    assert response.usage == Usage(input_tokens=13, output_tokens=44, reasoning_tokens=33)
    assert response.message.content == "2 + 2 = 4"
    (part,) = response.message.reasoning
    assert json.loads(part.data) == body["content"][0]


async def test_a_tool_use_goes_back_without_its_caller(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    asked, answered = recorded.responses("anthropic_opus_4_8_tool_use")
    claude.script += [fake_anthropic.RecordedReply(asked), fake_anthropic.RecordedReply(answered)]
    done = await run(client, task_queue, settings("anthropic", "claude-opus-4-8"))

    assert done.result is not None and done.result.answer == answered["content"][0]["text"]
    text, call = asked["content"]
    assert call["caller"] == {"type": "direct"}
    assert claude.requests[1].body["messages"][1]["content"] == [
        text,
        {"type": "tool_use", "id": call["id"], "name": call["name"], "input": call["input"]},
    ]


# --- the fakes hold the real rules for recorded items too ---------------------------------------


def test_a_recorded_reasoning_item_changed_gets_the_apis_400() -> None:
    reasoning = recorded.responses("openai_responses_gpt_5_6_reasoning_call")[0]["output"][0]
    served = {reasoning["id"]: reasoning}
    call = {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"}
    answer = {"type": "function_call_output", "call_id": "c", "output": "ok"}

    def sent(item: dict[str, Any]) -> dict[str, Any]:
        return {"input": [{"role": "user", "content": "hi"}, item, call, answer]}

    assert responses_error(sent(reasoning), served) is None
    changed = reasoning | {"encrypted_content": reasoning["encrypted_content"][:-4] + "AAAA"}
    refused = responses_error(sent(changed), served)
    assert refused is not None and refused.status == 400
    assert "could not be verified" in refused.body["error"]["message"]
    dropped = {k: v for k, v in reasoning.items() if k != "encrypted_content"}
    refused = responses_error(sent(dropped), served)
    assert refused is not None and "Items are not persisted" in refused.body["error"]["message"]


def test_a_recorded_thinking_block_changed_gets_the_apis_400() -> None:
    thinking, _, call = recorded.responses("anthropic_thinking_tool_use")[0]["content"]
    served = {fake_anthropic.block_key(thinking)}

    def sent(block: dict[str, Any]) -> dict[str, Any]:
        use = {"type": "tool_use", "id": call["id"], "name": call["name"], "input": {}}
        result = {"type": "tool_result", "tool_use_id": call["id"], "content": "Mexico"}
        return {
            "max_tokens": 4096,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [block, use]},
                {"role": "user", "content": [result]},
            ],
        }

    assert fake_anthropic.request_error(sent(thinking), served) is None
    changed = thinking | {"thinking": thinking["thinking"] + " "}
    refused = fake_anthropic.request_error(sent(changed), served)
    assert refused is not None and refused.status == 400
    assert "Invalid `signature`" in refused.body["error"]["message"]


# --- every field: read, or left for a reason ----------------------------------------------------

ECHOED = "the request's own setting, echoed"

CHAT_READ = {
    "id",
    "model",
    "choices[].finish_reason",
    "choices[].message.content",
    "choices[].message.refusal",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "usage.prompt_tokens_details.cached_tokens",
    "usage.prompt_tokens_details.cache_write_tokens",
    "usage.completion_tokens_details.reasoning_tokens",
}
CHAT_LEFT = {
    "object": "always chat.completion",
    "created": "the run keeps its own times",
    "service_tier": "the table holds standard-tier prices; another tier is priced in $AGENT_PRICES",
    "system_fingerprint": "a backend version, for reproducibility, which the loop does not ask",
    "choices[].index": "one choice is asked for",
    "choices[].message.role": "always assistant",
    "choices[].message.annotations": "URL citations of web search, which is never offered",
    "usage.total_tokens": "input and output, added up",
    "usage.prompt_tokens_details.audio_tokens": "no audio is sent",
    "usage.completion_tokens_details.audio_tokens": "no audio is asked for",
    "usage.completion_tokens_details.accepted_prediction_tokens": "no Predicted Output is sent",
    "usage.completion_tokens_details.rejected_prediction_tokens": "no Predicted Output is sent",
}
RESPONSES_READ = {
    "id",
    "model",
    "status",
    "error",
    "incomplete_details",
    "output[reasoning].*",  # kept whole and sent back as it came
    "output[message].type",
    "output[message].phase",
    "output[message].content[output_text].type",
    "output[message].content[output_text].text",
    "output[function_call].type",
    "output[function_call].call_id",
    "output[function_call].name",
    "output[function_call].arguments",
    "usage.input_tokens",
    "usage.input_tokens_details.cached_tokens",
    "usage.input_tokens_details.cache_write_tokens",
    "usage.output_tokens",
    "usage.output_tokens_details.reasoning_tokens",
}
RESPONSES_LEFT = {
    "object": "always response",
    "created_at": "the run keeps its own times",
    "completed_at": "the run keeps its own times",
    "output[message].id": "store=false: it names nothing the API could look up, and the API "
    "refuses an id it did not store",
    "output[message].role": "always assistant",
    "output[message].status": "the reply's own record; an incomplete reply is read from `status`",
    "output[message].content[output_text].annotations": "citations of built-in tools, never "
    "offered",
    "output[message].content[output_text].logprobs": "never asked for",
    "output[function_call].id": "the call goes back by its call_id; with store=false an id "
    "names nothing",
    "output[function_call].status": "the reply's own record",
    "usage.total_tokens": "input and output, added up",
    "billing.payer": "who pays, not what",
    "service_tier": "the table holds standard-tier prices; another tier is priced in $AGENT_PRICES",
    "tool_usage.*": "built-in tools (image generation, web search), never offered: all zero",
    "access_programs.*": "the organisation's programs, not the reply",
    **{
        name: ECHOED
        for name in (
            "background",
            "frequency_penalty",
            "presence_penalty",
            "instructions",
            "max_output_tokens",
            "max_tool_calls",
            "metadata",
            "moderation",
            "parallel_tool_calls",
            "previous_response_id",
            "prompt_cache_key",
            "prompt_cache_options.*",
            "prompt_cache_retention",
            "reasoning.*",
            "safety_identifier",
            "store",
            "temperature",
            "text.*",
            "tool_choice",
            "tools.*",
            "top_logprobs",
            "top_p",
            "truncation",
            "user",
        )
    },
}
MESSAGES_READ = {
    "id",
    "model",
    "stop_reason",
    "content[text].type",
    "content[text].text",
    "content[thinking].*",  # kept whole and sent back as it came
    "content[redacted_thinking].*",
    "content[tool_use].type",
    "content[tool_use].id",
    "content[tool_use].name",
    "content[tool_use].input.*",
    "usage.input_tokens",
    "usage.cache_read_input_tokens",
    "usage.cache_creation_input_tokens",
    "usage.output_tokens",
    "usage.output_tokens_details.thinking_tokens",
}
MESSAGES_LEFT = {
    "type": "always message",
    "role": "always assistant",
    "stop_sequence": "no stop sequence is sent",
    "stop_details": "a refusal's details; the loop reads stop_reason (null in these bodies)",
    "content[tool_use].caller.*": "who called: the model itself ('direct'); another caller "
    "comes only from the code execution tool, never offered",
    "usage.cache_creation.*": "the 5-minute and 1-hour writes apart: the adapter asks for "
    "5-minute writes only, so cache_creation_input_tokens is all of them, at 1.25x",
    "usage.service_tier": "the table holds standard-tier prices; another tier is priced in "
    "$AGENT_PRICES",
    "usage.inference_geo": "the adapter asks for no inference region: priced at the list price",
}
APIS = {
    "POST /v1/chat/completions": (CHAT_READ, CHAT_LEFT),
    "POST /v1/responses": (RESPONSES_READ, RESPONSES_LEFT),
    "POST /v1/messages": (MESSAGES_READ, MESSAGES_LEFT),
}
FIXTURES = sorted(path.stem for path in recorded.HERE.glob("*.json"))


def fields(value: Any, path: str = "") -> Iterator[str]:
    """The path of every field of a body: a list's items are named by their `type`."""
    if isinstance(value, dict):
        if not value and path:
            yield path
        for key, inner in value.items():
            yield from fields(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        if not value:
            yield path
        for item in value:
            kind = item.get("type", "") if isinstance(item, dict) else ""
            yield from fields(item, f"{path}[{kind}]")
    else:
        yield path


def covered(path: str, names: set[str] | dict[str, str]) -> bool:
    """Whether `names` name the path, or a field it is part of ("tools.*": the whole of it)."""
    for name in names:
        stem = name.removesuffix(".*")
        if path == name or (
            stem != name and (path == stem or path.startswith((f"{stem}.", f"{stem}[")))
        ):
            return True
    return False


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_field_of_a_recorded_body_is_read_or_left_for_a_reason(fixture: str) -> None:
    data = recorded.load(fixture)
    read, left = APIS[data["source"]["api"]]
    assert not [name for name in read if name in left]
    for body in data["responses"]:
        unknown = sorted({p for p in fields(body) if not covered(p, read) and not covered(p, left)})
        assert unknown == [], f"{fixture}: read these fields, or say in this file why not"


COMPLETE = {
    "POST /v1/chat/completions": ("openai", chat_complete),
    "POST /v1/responses": ("openai-responses", openai_responses_provider.complete),
    "POST /v1/messages": ("anthropic", anthropic_complete),
}


@pytest.mark.parametrize("fixture", FIXTURES)
async def test_every_count_read_reaches_the_calls_usage(
    fixture: str, openai: FakeOpenAI, claude: fake_anthropic.FakeAnthropic
) -> None:
    """The usage counts named read above are read: each, changed in the body the fake sends,
    changes the call's usage (through the real SDK, as the model activity gets it)."""
    data = recorded.load(fixture)
    api = data["source"]["api"]
    provider, complete = COMPLETE[api]
    counts = sorted(name for name in APIS[api][0] if name.startswith("usage."))

    async def usage_of(body: dict[str, Any]) -> Usage:
        if provider == "anthropic":
            claude.script.append(fake_anthropic.RecordedReply(body))
        else:
            openai.script.append(RecordedReply(body))
        request = ModelRequest(
            settings=settings(provider, body["model"]),
            system=None,
            messages=[UserMessage(content=PROMPT)],
            tools=[],
            step=1,
        )
        return (await complete(request)).usage

    for body in data["responses"]:
        before = await usage_of(body)
        for name in counts:
            *path, last = name.split(".")
            changed = json.loads(json.dumps(body))
            where = changed
            for key in path:
                where = where.setdefault(key, {})
            if not isinstance(where.get(last, 0), int):
                continue
            where[last] = where.get(last, 0) + 7
            assert await usage_of(changed) != before, f"{fixture}: {name} is not read"


def test_the_recorded_sources_are_named() -> None:
    for fixture in FIXTURES:
        source = recorded.load(fixture)["source"]
        assert source["repository"] == "pydantic/pydantic-ai" and len(source["commit"]) == 40
        assert source["licence"].startswith("MIT") and source["path"].endswith(".yaml")
