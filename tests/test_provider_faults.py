"""Provider and infrastructure faults, through both provider adapters and a real workflow run:
rate-limit storms, server errors that never stop, reset connections, replies slower than the
model activity's timeout, and a tool that hangs.

Each fault is retried by Temporal (the SDKs' own retries are off), so every attempt is an
activity attempt in the run's history; and each is bounded: a provider that never recovers fails
the run within its retry policy or its wall-time limit, not never.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.api.failure.v1 import Failure
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

import tests.tools_for_tests as test_tools
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.transcript import Message, Transcript
from tests import fake_anthropic, fake_openai
from tests.helpers import TEST_WORKER_OPTIONS

FAST = RetrySettings(maximum_attempts=3, initial_interval_seconds=0.05, backoff_coefficient=1)


@dataclass
class Provider:
    """One provider's fake and its script entries: the same faults in each one's own shape."""

    name: str
    fake: Any
    module: Any

    def reply(self, text: str) -> Any:
        return self.module.Reply(text)

    def error(self, status: int, message: str, **options: Any) -> Any:
        return self.module.error(status, message, **options)

    def hangup(self) -> Any:
        return self.module.Hangup()

    def slow(self, seconds: float, text: str) -> Any:
        return self.module.Slow(seconds, self.reply(text))

    def input(self, *, retry: RetrySettings = FAST, **options: Any) -> AgentInput:
        model = ModelSettings(
            provider=self.name,
            model="fake-model",
            retry=retry,
            timeout_seconds=options.pop("timeout_seconds", 5.0),
        )
        return AgentInput(prompt="where is order 1042", model=model, **{"tools": [], **options})


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provider]:
    module: Any = fake_openai if request.param == "openai" else fake_anthropic
    server = module.FakeOpenAI() if request.param == "openai" else module.FakeAnthropic()
    prefix = request.param.upper()
    with server:
        monkeypatch.setenv(f"{prefix}_API_KEY", server.api_key)
        monkeypatch.setenv(f"{prefix}_BASE_URL", server.base_url)
        yield Provider(request.param, server, module)


@dataclass
class Outcome:
    handle: WorkflowHandle[Any, AgentResult]
    result: AgentResult | None
    error: ApplicationError | None
    transcript: list[Message]
    seconds: float


async def run(client: Client, task_queue: str, agent_input: AgentInput) -> Outcome:
    started = time.monotonic()
    async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
        handle = await client.start_workflow(
            AgentWorkflow.run, agent_input, id=f"faults-{uuid.uuid4()}", task_queue=task_queue
        )
        result, error = None, None
        try:
            result = await handle.result()
        except WorkflowFailureError as failure:
            assert isinstance(failure.cause, ApplicationError), failure.cause
            error = failure.cause
        seconds = time.monotonic() - started
        transcript = await handle.query(AgentWorkflow.transcript)
    assert Transcript(messages=transcript).is_complete()
    return Outcome(handle, result, error, transcript, seconds)


async def attempts(handle: WorkflowHandle[Any, Any], activity: str) -> list[tuple[int, Failure]]:
    """(attempt, the previous attempt's failure) of each started `activity`, from the history:
    the server records one started event per activity, carrying its last attempt's number."""
    history = await handle.fetch_history()
    scheduled: dict[int, str] = {}
    started = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attributes.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            info = event.activity_task_started_event_attributes
            if scheduled[info.scheduled_event_id] == activity:
                started.append((info.attempt, info.last_failure))
    return started


async def test_a_rate_limit_storm_is_waited_out_at_the_servers_pace(
    client: Client, task_queue: str, provider: Provider
) -> None:
    limited = provider.error(
        429, "Rate limit reached", type="rate_limit_error", headers={"retry-after-ms": "300"}
    )
    provider.fake.script += [limited] * 4 + [provider.reply("Delivered yesterday.")]
    retry = RetrySettings(maximum_attempts=6, initial_interval_seconds=0.01, backoff_coefficient=1)
    outcome = await run(client, task_queue, provider.input(retry=retry))

    assert outcome.result is not None and outcome.result.answer == "Delivered yesterday."
    assert outcome.result.step_records[0].model_attempts == 5
    assert len(provider.fake.requests) == 5 and provider.fake.remaining == 0
    assert len({request.raw for request in provider.fake.requests}) == 1
    # Four waits of the server's 300 ms, not of the policy's 10 ms.
    assert outcome.seconds >= 1.2
    [(attempt, last_failure)] = await attempts(outcome.handle, "call_model")
    assert attempt == 5
    assert last_failure.application_failure_info.type == "ProviderTransientError"
    assert "HTTP 429" in last_failure.message and "Rate limit reached" in last_failure.message


async def test_server_errors_that_never_stop_fail_the_run_within_its_retry_policy(
    client: Client, task_queue: str, provider: Provider
) -> None:
    provider.fake.script += [provider.error(503, "Service unavailable", type="api_error")] * 10
    outcome = await run(client, task_queue, provider.input())

    assert outcome.error is not None and outcome.error.type == "AgentProviderError"
    assert outcome.error.message.startswith(
        "model call failed after its retries: ProviderTransientError: "
    )
    assert "HTTP 503" in outcome.error.message
    # The policy's three attempts, then the run ends: the rest of the script is never asked for.
    assert len(provider.fake.requests) == 3 and provider.fake.remaining == 7
    assert outcome.seconds < 10
    [(attempt, last_failure)] = await attempts(outcome.handle, "call_model")
    assert attempt == 3 and "HTTP 503" in last_failure.message
    assert [m.role for m in outcome.transcript] == ["user"]


async def test_a_reset_connection_is_retried(
    client: Client, task_queue: str, provider: Provider
) -> None:
    provider.fake.script += [provider.hangup(), provider.reply("Delivered yesterday.")]
    outcome = await run(client, task_queue, provider.input())

    assert outcome.result is not None and outcome.result.answer == "Delivered yesterday."
    assert len(provider.fake.requests) == 2
    [(attempt, last_failure)] = await attempts(outcome.handle, "call_model")
    assert attempt == 2
    assert last_failure.application_failure_info.type == "ProviderTransientError"
    assert last_failure.message.startswith("could not reach ")


async def test_a_reply_slower_than_the_activity_timeout_is_retried(
    client: Client, task_queue: str, provider: Provider
) -> None:
    provider.fake.script += [provider.slow(6.0, "too late"), provider.reply("Delivered.")]
    outcome = await run(client, task_queue, provider.input(timeout_seconds=0.5))

    assert outcome.result is not None and outcome.result.answer == "Delivered."
    assert outcome.seconds < 5  # the slow reply was not waited for
    [(attempt, last_failure)] = await attempts(outcome.handle, "call_model")
    assert attempt == 2
    # The SDK's own timeout and the activity's start-to-close are the same 0.5 s; whichever
    # fires first, the attempt failed for being slow, and the next one was made.
    if last_failure.HasField("timeout_failure_info"):
        assert last_failure.timeout_failure_info.timeout_type == (
            TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE
        )
    else:
        assert last_failure.application_failure_info.type == "ProviderTransientError"
        assert "did not answer within 0.5s" in last_failure.message


async def test_a_provider_that_never_answers_is_cut_by_the_wall_time_limit(
    client: Client, task_queue: str, provider: Provider
) -> None:
    provider.fake.script += [provider.slow(3.0, "never in time")] * 20
    agent_input = provider.input(
        timeout_seconds=0.4,
        retry=RetrySettings(maximum_attempts=0, initial_interval_seconds=0.05),  # unlimited
        limits=Limits(max_wall_seconds=3),
    )
    outcome = await run(client, task_queue, agent_input)

    # Bounded by the run's three seconds (with room for a loaded machine), not by the retries.
    assert outcome.seconds < 10, outcome.error
    # Retried, as the policy allows, until the time ran out: one request per attempt. (The
    # history may have no started event to count: an activity whose deadline passes between
    # attempts goes from scheduled to timed out.)
    assert 2 <= len(provider.fake.requests) < 20, outcome.error
    # Whether the deadline fell inside an attempt or the server saw that no further attempt
    # could end before it, the run failed because its time ran out, and says so by name.
    assert outcome.error is not None and outcome.error.type == "AgentBudgetExceeded"
    assert "max_wall_seconds=3" in outcome.error.message


async def test_a_tool_that_hangs_is_cut_by_its_timeout(
    client: Client, task_queue: str, provider: Provider
) -> None:
    test_tools.executions.clear()
    test_tools.release_blocked.clear()
    asked: Any
    if provider.name == "openai":
        asked = fake_openai.Reply(tool_calls=[("c_hang", "hang_blocking", '{"seconds": 10}')])
    else:
        asked = fake_anthropic.Reply(tool_uses=[("c_hang", "hang_blocking", {"seconds": 10})])
    provider.fake.script += [asked, provider.reply("The lookup timed out.")]
    try:
        outcome = await run(client, task_queue, provider.input(tools=["hang_blocking"]))
    finally:
        test_tools.release_blocked.set()

    assert outcome.result is not None and outcome.result.answer == "The lookup timed out."
    assert outcome.seconds < 8  # two tries of 0.3 s, not the tool's 10 s
    assert test_tools.executions["hang_blocking"] == 2
    record = outcome.result.step_records[0].tool_calls[0]
    assert (record.outcome, record.attempts) == ("error", 2)
    # What the model was sent: an error result naming the timeout.
    expected = "Error: hang_blocking timed out (limit 0.3 s a try)."
    last = provider.fake.requests[-1].body["messages"]
    if provider.name == "openai":
        assert last[-1] == {"role": "tool", "tool_call_id": "c_hang", "content": expected}
    else:
        [result] = last[-1]["content"]
        assert (result["tool_use_id"], result["content"]) == ("c_hang", expected)
        assert result["is_error"] is True
    [(attempt, last_failure)] = await attempts(outcome.handle, "hang_blocking")
    assert attempt == 2
    assert last_failure.timeout_failure_info.timeout_type == TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE
