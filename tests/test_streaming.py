"""Streaming model calls through the real SDKs against the fakes' server-sent events: the
transcript gets what an unstreamed call gives, `AgentRun.deltas()` sees the text while it is
written, the history gets no event for it, and a retried attempt's deltas are marked void."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

import tests.guardrails_for_tests  # noqa: F401  (registers `polite`)
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ModelDelta
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.guardrail_data import GuardrailPolicy
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings
from tests import fake_anthropic, fake_openai
from tests.helpers import FAST_MODEL_RETRY, TEST_WORKER_OPTIONS, eventually, run_agent

TOOLS = ["search_orders", "get_order", "get_tracking", "get_customer"]
SEARCH = ("toolu_search", "search_orders", {"email": "a@b.com"})
CUSTOMER = ("toolu_cust", "get_customer", {"email": "a@b.com"})
TRACKING = ("toolu_track", "get_tracking", {"order_id": 1042})
ANSWER = "Ada, your order #1042 was delivered yesterday at 14:20 UTC, to the front desk."


def anthropic_input(stream: bool, **settings: Any) -> AgentInput:
    return AgentInput(
        prompt="where is order 1042",
        tools=TOOLS,
        model=ModelSettings(
            provider="anthropic",
            model="claude-fake-sonnet",
            thinking_budget_tokens=1024,
            stream=stream,
            retry=FAST_MODEL_RETRY,
            **settings,
        ),
    )


def anthropic_script(**last: Any) -> list[Any]:
    return [
        fake_anthropic.Reply(thinking="Search by email first.", tool_uses=[SEARCH]),
        fake_anthropic.Reply(
            "Found it; checking two things at once.",
            thinking="Customer and parcel, in parallel.",
            tool_uses=[CUSTOMER, TRACKING],
        ),
        fake_anthropic.Reply(ANSWER, thinking="Delivered: say where.", **last),
    ]


WORKFLOW_TASK_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
}


async def history_event_types(run: Any) -> Counter[int]:
    """The run's events by type, but for workflow tasks (how many there are depends on how the
    parallel calls' completions happen to batch, streamed or not)."""
    return Counter(
        [
            event.event_type
            async for event in run.handle.fetch_history_events()
            if event.event_type not in WORKFLOW_TASK_EVENTS
        ]
    )


async def test_a_streamed_anthropic_run_gives_the_transcript_an_unstreamed_one_does(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    claude.script += anthropic_script()
    plain = await run_agent(client, task_queue, anthropic_input(stream=False))
    claude.script += anthropic_script()
    streamed = await run_agent(client, task_queue, anthropic_input(stream=True))

    assert plain.result is not None and streamed.result is not None, streamed.error
    assert streamed.result.answer == plain.result.answer == ANSWER
    assert streamed.transcript == plain.transcript  # the thinking blocks and signatures too
    assert [r.body.get("stream") for r in claude.requests] == [None] * 3 + [True] * 3
    for request in claude.requests:
        assert fake_anthropic.request_error(request.body) is None
    # The same events: streaming adds none to the history (no signal, no marker per delta).
    assert await history_event_types(streamed) == await history_event_types(plain)


async def test_a_streamed_responses_run_gives_the_transcript_an_unstreamed_one_does(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script() -> list[Any]:
        search = ("call_s", "search_orders", '{"email": "a@b.com"}')
        return [
            fake_openai.ResponsesReply(reasoning="Search first.", calls=[search]),
            fake_openai.ResponsesReply(ANSWER, reasoning="Answer."),
        ]

    runs = []
    for stream in (False, True):
        with fake_openai.FakeOpenAI(script()) as fake:  # the same item ids for both runs
            monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            model = ModelSettings(
                provider="openai-responses",
                model="gpt-5-mini",
                reasoning_effort="low",
                stream=stream,
                retry=FAST_MODEL_RETRY,
            )
            agent_input = AgentInput(prompt="where is order 1042", tools=TOOLS, model=model)
            runs.append(await run_agent(client, task_queue, agent_input))
            assert [r.body.get("stream") for r in fake.requests] == [stream or None] * 2
            assert all(fake_openai.responses_error(r.body) is None for r in fake.requests)
    plain, streamed = runs
    assert streamed.result is not None, streamed.error
    assert streamed.result.answer == ANSWER
    assert streamed.transcript == plain.transcript
    assert await history_event_types(streamed) == await history_event_types(plain)


async def test_a_streamed_chat_completions_run_gives_the_transcript_an_unstreamed_one_does(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def script() -> list[Any]:
        search = ("call_s", "search_orders", '{"email": "a@b.com"}')
        both = [
            ("call_c", "get_customer", '{"email": "a@b.com"}'),
            ("call_t", "get_tracking", '{"order_id": 1042}'),
        ]
        return [
            fake_openai.Reply(tool_calls=[search]),
            fake_openai.Reply("Checking two things.", tool_calls=both, cached_tokens=128),
            fake_openai.Reply(ANSWER),
        ]

    runs = []
    for stream in (False, True):
        with fake_openai.FakeOpenAI(script()) as fake:
            monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            model = ModelSettings(
                provider="openai", model="gpt-fake-mini", stream=stream, retry=FAST_MODEL_RETRY
            )
            agent_input = AgentInput(prompt="where is order 1042", tools=TOOLS, model=model)
            runs.append(await run_agent(client, task_queue, agent_input))
            assert [r.body.get("stream") for r in fake.requests] == [stream or None] * 3
            assert all(fake_openai.pairing_error(r.body["messages"]) is None for r in fake.requests)
    plain, streamed = runs
    assert streamed.result is not None and plain.result is not None, streamed.error
    assert streamed.result.answer == ANSWER
    assert streamed.transcript == plain.transcript
    cached = [r.usage.cached_input_tokens for r in streamed.result.step_records]
    assert cached == [r.usage.cached_input_tokens for r in plain.result.step_records] == [0, 128, 0]
    assert await history_event_types(streamed) == await history_event_types(plain)


async def _start(client: Client, task_queue: str, agent_input: AgentInput) -> AgentRun:
    handle = await client.start_workflow(
        AgentWorkflow.run, agent_input, id=f"stream-{uuid.uuid4()}", task_queue=task_queue
    )
    return AgentRun(handle, client)


def _text(deltas: list[ModelDelta], attempt: int | None = None) -> str:
    return "".join(d.text for d in deltas if d.kind == "text" and attempt in (None, d.attempt))


async def _read_until(
    reading: AsyncIterator[ModelDelta], deltas: list[ModelDelta], done: Callable[[], bool]
) -> None:
    """Collect deltas until `done()` holds (an observable state, not a time)."""
    async with asyncio.timeout(20):
        while not done():
            deltas.append(await anext(reading))


async def test_deltas_arrive_while_the_model_writes(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    # The answer's stream: message_start, the thinking block (start, 3 deltas, signature,
    # stop), then the text's start and deltas of 8 characters: it stops after 6 of them until
    # the test has seen them.
    claude.script += anthropic_script(pause_after=14)
    deltas: list[ModelDelta] = []
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await _start(client, task_queue, anthropic_input(stream=True))
        reading = agent_run.deltas()
        answer = lambda: _text([d for d in deltas if d.step == 3])  # noqa: E731
        await _read_until(reading, deltas, lambda: len(answer()) >= 48)
        # Seen while the reply was being written: two calls done, the third waited for.
        status = await agent_run.status()
        assert status.step == 2 and status.details.startswith("step 3: waiting"), status
        assert answer() == ANSWER[:48]
        claude.hold.set()
        async for delta in reading:
            deltas.append(delta)
        result = await agent_run.result()
    assert result.answer == ANSWER
    assert ANSWER.startswith(answer())
    reasoning = "".join(d.text for d in deltas if d.kind == "reasoning" and d.step == 3)
    assert reasoning == "Delivered: say where."
    assert not [d for d in deltas if d.kind == "void"]


async def test_a_retried_stream_marks_the_failed_attempts_deltas_void(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    # Events 0-11 of the first attempt: message_start, the thinking block (start, 2 deltas,
    # signature, stop), the text's start and 5 deltas of 8 characters; then a pause and a reset.
    cut = fake_anthropic.Reply(ANSWER, thinking="Say where.", pause_after=12, hangup_after=12)
    claude.script += [cut, fake_anthropic.Reply(ANSWER, thinking="Say where.")]
    deltas: list[ModelDelta] = []
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await _start(client, task_queue, anthropic_input(stream=True))
        reading = agent_run.deltas()
        await _read_until(reading, deltas, lambda: len(_text(deltas, attempt=1)) >= 40)
        claude.hold.set()  # the stream breaks off, the attempt fails, the retry streams anew
        async for delta in reading:
            deltas.append(delta)
        result = await agent_run.result()
        events = [item.data async for item in agent_run.events()]
    assert result.answer == ANSWER and result.step_records[0].model_attempts == 2
    kinds = [(d.attempt, d.kind) for d in deltas]
    void = kinds.index((1, "void"))
    assert all(attempt == 1 for attempt, _ in kinds[:void])
    assert _text(deltas, attempt=1) == ANSWER[:40]
    assert all(attempt == 2 for attempt, _ in kinds[void + 1 :])
    assert ANSWER.startswith(_text(deltas, attempt=2))
    # The retry says so on the progress stream too.
    assert [e.attempts for e in events if e.kind == "retry"] == [2]


async def test_a_run_with_output_guardrails_streams_but_shows_no_text_before_they_read_it(
    client: Client, task_queue: str, claude: fake_anthropic.FakeAnthropic
) -> None:
    """The answer is held mid-stream, its first 48 characters written. The call streams from
    the provider, but its beats carry none of it: an output guardrail reads the answer before
    anyone may. The answer comes out whole once `polite` has read it."""
    claude.script += anthropic_script(pause_after=14)
    guarded = anthropic_input(stream=True).model_copy(
        update={"guardrails": GuardrailPolicy(output=["polite"])}
    )
    deltas: list[ModelDelta] = []
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        agent_run = await _start(client, task_queue, guarded)

        async def answer_call_beats_without_text() -> bool:
            calls = (await agent_run.model_calls()).calls
            return len(claude.requests) == 3 and [c.not_streaming for c in calls] == [True]

        await eventually(answer_call_beats_without_text, what="step 3's call to beat")
        reading = asyncio.create_task(_collect(agent_run.deltas(), deltas))
        claude.hold.set()
        result = await agent_run.result()
        await reading
    assert result.answer == ANSWER
    assert [r.body.get("stream") for r in claude.requests] == [True] * 3
    assert deltas == []
    assert [(g.name, g.tripped) for g in result.step_records[-1].guardrails] == [("polite", False)]


async def _collect(reading: AsyncIterator[ModelDelta], into: list[ModelDelta]) -> None:
    async for delta in reading:
        into.append(delta)
