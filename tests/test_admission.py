"""Admission control per provider: a real provider's model calls land on that provider's task
queue, a worker never has more of them in flight than its limit (counted at the fake), a
`retry-after` holds that provider's next calls on the worker, and a bad limit stops the worker
at start in one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, PendingActivityState
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError

from durable_agent.activities import admission
from durable_agent.activities.admission import Admission, Gate, ModelLimits, ProviderLimits
from durable_agent.serving.plugin import AgentPlugin
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentConfigurationError
from durable_agent.workflows.inputs import AgentInput, AgentResult
from durable_agent.workflows.model_gateway import model_task_queue
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import RetrySettings
from tests import fake_openai
from tests.helpers import TEST_WORKER_OPTIONS, eventually

ROOT = Path(__file__).resolve().parent.parent
UNREACHABLE = "127.0.0.1:1"
RETRY = RetrySettings(maximum_attempts=4, initial_interval_seconds=0.05, backoff_coefficient=1)


@pytest.fixture
def openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No limits from the environment this test runs in."""
    for name in list(os.environ):
        if name.startswith(("AGENT_MODEL_CONCURRENCY", "AGENT_MODEL_RATE")):
            monkeypatch.delenv(name)


def openai_input(prompt: str) -> AgentInput:
    model = ModelSettings(provider="openai", model="gpt-fake", retry=RETRY, timeout_seconds=30)
    return AgentInput(prompt=prompt, model=model, tools=[])


def pointed_at(fake: fake_openai.FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)


async def start(client: Client, task_queue: str, prompt: str) -> WorkflowHandle[Any, AgentResult]:
    return await client.start_workflow(
        AgentWorkflow.run, openai_input(prompt), id=f"admit-{uuid.uuid4()}", task_queue=task_queue
    )


async def pending_model_calls(handles: list[WorkflowHandle[Any, AgentResult]]) -> list[Any]:
    states = []
    for handle in handles:
        description = await handle.describe()
        states += [
            p.state
            for p in description.raw_description.pending_activities
            if p.activity_type.name == "call_model"
        ]
    return states


async def test_model_calls_land_on_the_providers_queue_and_n_at_most_are_in_flight(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch, openai_env: None
) -> None:
    release = threading.Event()
    fake = fake_openai.FakeOpenAI(responder=lambda body: fake_openai.Reply("ok"), hold=release)
    pointed_at(fake, monkeypatch)
    monkeypatch.setenv("AGENT_MODEL_CONCURRENCY_OPENAI", "2")
    with fake:
        async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS):
            handles = [await start(client, task_queue, f"run {i}") for i in range(6)]
            try:
                # Two calls are held at the fake; the other four wait on the server, unstarted.
                await eventually(lambda: fake.in_flight == 2, what="two calls at the fake")
                scheduled = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
                started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED

                async def two_started_four_waiting() -> bool:
                    states = await pending_model_calls(handles)
                    return sorted(states) == sorted([started] * 2 + [scheduled] * 4)

                await eventually(two_started_four_waiting)
                assert fake.in_flight == 2
            finally:
                release.set()
            results = [await handle.result() for handle in handles]

    assert [r.answer for r in results] == ["ok"] * 6
    assert len(fake.requests) == 6 and fake.refused == 0
    assert fake.peak_in_flight == 2
    history = await handles[0].fetch_history()
    queues = [
        e.activity_task_scheduled_event_attributes.task_queue.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]
    assert queues == [model_task_queue(task_queue, "openai")] == [f"{task_queue}-model-openai"]


async def test_a_retry_after_holds_the_providers_next_calls_on_this_worker(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch, openai_env: None
) -> None:
    """The first call is answered 429 with retry-after-ms 800: a second run's call, started
    after it, reaches the provider only once the 800 ms have passed, as the retry does."""
    wait = 0.8
    answered_429 = False

    def responder(body: dict[str, Any]) -> fake_openai.Reply | fake_openai.HttpReply:
        nonlocal answered_429
        if not answered_429:
            answered_429 = True
            return fake_openai.error(
                429,
                "Rate limit reached for requests",
                type="requests",
                code="rate_limit_exceeded",
                headers={"retry-after-ms": str(int(wait * 1000))},
            )
        return fake_openai.Reply("ok")

    fake = fake_openai.FakeOpenAI(responder=responder)
    pointed_at(fake, monkeypatch)
    queue = model_task_queue(task_queue, "openai")
    with fake:
        async with build_worker(client, task_queue, **TEST_WORKER_OPTIONS) as worker:
            (plugin,) = [p for p in worker.config()["plugins"] if isinstance(p, AgentPlugin)]
            gate = plugin.gates.gate(queue, "openai")
            first = await start(client, task_queue, "first")
            await eventually(lambda: gate.holds == 1, what="the hold")
            second = await start(client, task_queue, "second")
            assert (await first.result()).answer == (await second.result()).answer == "ok"

    limited, *later = fake.requests
    assert limited.body["messages"][-1]["content"] == "first"
    # The first run's retry (Temporal's next_retry_delay) and the second run's call (the hold).
    assert sorted(r.body["messages"][-1]["content"] for r in later) == ["first", "second"]
    assert all(request.at >= limited.at + wait for request in later)


async def test_a_hold_longer_than_the_attempt_fails_it_at_once_to_be_retried_after() -> None:
    gate = Gate("openai", ProviderLimits())
    gate.hold(timedelta(seconds=30))
    with pytest.raises(ApplicationError) as raised:
        async with gate.admit("gpt-fake", latest_start=time.monotonic() + 1):
            raise AssertionError("the provider was called")
    assert not raised.value.non_retryable
    delay = raised.value.next_retry_delay
    assert delay is not None and timedelta(seconds=29) < delay <= timedelta(seconds=30)


async def test_a_models_own_limit_admits_one_call_at_a_time() -> None:
    limits = ProviderLimits(models={"GPT_4O": ModelLimits(concurrency=1)})
    gate = Gate("openai", limits)
    inside = 0
    most = 0
    entered = asyncio.Event()
    let_go = asyncio.Event()

    async def call(model: str) -> None:
        nonlocal inside, most
        async with gate.admit(model):
            inside += 1
            most = max(most, inside)
            entered.set()
            await let_go.wait()
            inside -= 1

    first = asyncio.create_task(call("gpt-4o"))
    await entered.wait()
    second = asyncio.create_task(call("gpt-4o"))
    other = asyncio.create_task(call("gpt-4o-mini"))
    await eventually(lambda: inside == 2, what="gpt-4o-mini beside the first gpt-4o")
    let_go.set()
    await asyncio.gather(first, second, other)
    assert most == 2  # one gpt-4o and the gpt-4o-mini; never two gpt-4o


def test_the_variables_read_as_limits() -> None:
    read = Admission.from_env(
        {
            "AGENT_MODEL_CONCURRENCY_OPENAI": "8",
            "AGENT_MODEL_RATE_OPENAI": "300/min",
            "AGENT_MODEL_CONCURRENCY_OPENAI_GPT_4O": "2",
            "AGENT_MODEL_RATE_ANTHROPIC": "2.5",
            "PATH": "/bin",
        }
    )
    openai = read.limits("openai")
    assert (openai.concurrency, openai.rate_per_second) == (8, 5.0)
    assert openai.for_model("gpt-4o") == ModelLimits(concurrency=2)
    assert openai.for_model("gpt-4o-mini") == ModelLimits()
    assert read.limits("anthropic") == ProviderLimits(rate_per_second=2.5)
    assert Admission.from_env({}) == Admission()


BAD = {
    "AGENT_MODEL_CONCURRENCY_OPENAI=0": (
        "AGENT_MODEL_CONCURRENCY_OPENAI='0': must be a whole number of calls at once, at least 1"
    ),
    "AGENT_MODEL_RATE_ANTHROPIC=fast": (
        "AGENT_MODEL_RATE_ANTHROPIC='fast': must be calls a second above 0, as 5, 5/s or 300/min"
    ),
    "AGENT_MODEL_RATE_OPENIA=5": (
        "AGENT_MODEL_RATE_OPENIA names no provider: after AGENT_MODEL_RATE_ comes OPENAI, "
        "ANTHROPIC or OPENAI_RESPONSES, then _<MODEL> for one model (scripted model calls take "
        "no limits)"
    ),
}


@pytest.mark.parametrize("setting", sorted(BAD))
def test_a_bad_limit_stops_the_worker_in_one_line(
    setting: str, tmp_path: Path, openai_env: None
) -> None:
    name, value = setting.split("=", 1)
    env = {**os.environ, name: value, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "worker.py"), "--address", UNREACHABLE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"worker.py: error: {BAD[setting]}\n"
    with pytest.raises(AgentConfigurationError):
        Admission.from_env({name: value})


def test_a_bad_limit_stops_the_cli_before_its_embedded_server_starts(
    tmp_path: Path, openai_env: None
) -> None:
    env = {**os.environ, "AGENT_MODEL_CONCURRENCY_OPENAI": "many", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "starter.py"), "hello", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "starter.py: error: AGENT_MODEL_CONCURRENCY_OPENAI='many': must be a whole number of "
        "calls at once, at least 1\n"
    )
    assert done.stdout == ""


async def test_a_retry_after_halves_the_window_and_calls_served_widen_it_again() -> None:
    gate = Gate("openai", ProviderLimits(concurrency=4))
    let_go = asyncio.Event()
    refuse = asyncio.Event()

    async def call(answer: ApplicationError | None = None, after: asyncio.Event = let_go) -> None:
        async with gate.admit("gpt-fake"):
            await after.wait()
            if answer is not None:
                raise answer

    limited = ApplicationError("429", next_retry_delay=timedelta(milliseconds=1))
    calls = [asyncio.create_task(call()) for _ in range(3)]
    refused = asyncio.create_task(call(limited, refuse))
    await eventually(lambda: gate.in_flight == 4, what="four calls let through")
    refuse.set()  # the 429 comes back while the other three are still at the provider
    with pytest.raises(ApplicationError):
        await refused
    assert gate.window == 2 and gate.holds == 1  # half of the four in flight at the 429
    let_go.set()
    await asyncio.gather(*calls)
    for _ in range(admission.RECOVERY_SUCCESSES * 2 - 3):  # the three above were served too
        await call()
    assert gate.window == 3
    for _ in range(admission.RECOVERY_SUCCESSES * 3):
        await call()
    assert gate.window is None  # back at the configured 4: no narrowing left
