"""Crash safety, proven: kill the worker (SIGKILL) or the Temporal server mid-run, and the run
still ends exactly as it would have without the crash.

Every worker here is a separate process (`tests/crash_worker.py`) over its own copy of one seeded
demo database, so that the tool results of two runs are equal to the byte. A crash test starts
a worker that kills itself at a named point, waits for it to die, starts a fresh worker, and then
compares the run with a reference run of the same script on a worker that never crashed: the
same transcript, the same result or failure, the same database, every side effect applied once,
and every tool call answered.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType, TimeoutType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from durable_agent.demo import tools as demo_tools
from durable_agent.serving.dev_server import free_port, temporal_binary
from durable_agent.serving.worker import connect
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.status import SEARCH_ATTRIBUTES
from durable_agent.workflows.transcript import Transcript
from tests.helpers import TRUSTED, call, eventually, turn

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ["get_order", "get_customer", "cancel_order", "issue_refund", "send_email"]
ATTEMPT_TIMEOUT = timedelta(seconds=3)
"""Start-to-close timeout of a model call and of a workflow task: how long the server waits
before it gives a lost attempt to another worker. The tools' own is in crash_worker.py."""
QUICK_RETRY = RetrySettings(maximum_attempts=10, initial_interval_seconds=0.1)

SCRIPT = [
    turn(call("get_order", order_id=104999), call("get_customer", email="a@b.com")),
    turn(
        call("cancel_order", order_id=104999, reason="customer asked"),
        call("issue_refund", order_id=1042, amount=10),
        expect='"status": "processing"',
    ),
    turn(
        call(
            "send_email",
            to="a@b.com",
            subject="Order 104999 cancelled",
            body="Your order 104999 is cancelled and 10.00 USD of order 1042 is refunded.",
        ),
        expect='"refund_id": 1',
    ),
    turn(text="Order 104999 is cancelled, 10.00 USD is refunded, and an email says so."),
]


def agent_input(script: list[Any], max_steps: int = 10) -> AgentInput:
    return AgentInput(
        prompt="Cancel order 104999 and refund 10 USD on order 1042; tell a@b.com.",
        tools=TOOLS,
        model=ModelSettings(
            provider="scripted",
            script=script,
            timeout_seconds=ATTEMPT_TIMEOUT.total_seconds(),
            retry=QUICK_RETRY,
        ),
        limits=Limits(max_steps=max_steps),
        tool_approval=TRUSTED,
    )


INPUTS = {
    # Three steps of tools, then the answer.
    "completes": agent_input(SCRIPT),
    # The same three steps; the step limit then fails the run, which undoes its three effects.
    "compensates": agent_input(SCRIPT, max_steps=3),
}


# --- processes ----------------------------------------------------------------------------------


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    log: Path
    crash_file: Path | None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


class Processes:
    """Every process a test starts; the fixture kills whatever is left, whatever happened."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Path:
        log = self.directory / f"{name}.log"
        with log.open("wb") as out:
            self.started.append(
                subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            )
        return log

    async def worker(
        self,
        name: str,
        address: str,
        task_queue: str,
        db: Path,
        crash_at: str | None = None,
        mcp_config: Path | None = None,
    ) -> WorkerProcess:
        ready = self.directory / f"{name}.ready"
        command = [sys.executable, "-m", "tests.crash_worker", "--address", address]
        command += ["--task-queue", task_queue, "--ready-file", str(ready)]
        if mcp_config is not None:
            command += ["--mcp-config", str(mcp_config)]
        crash_file = None
        if crash_at is not None:
            crash_file = self.directory / f"{name}.crashed"
            command += ["--crash-at", crash_at, "--crash-file", str(crash_file)]
        log = self.start(name, command, {**os.environ, "AGENT_DEMO_DB": str(db)})
        worker = WorkerProcess(self.started[-1], log, crash_file)
        await eventually(
            lambda: ready.exists() or worker.process.poll() is not None, 30, f"{name} to poll"
        )
        assert ready.exists(), f"{name} died before polling:\n{worker.output()}"
        return worker

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One seeded database; every run gets its own copy, so seed timestamps are the same."""
    path = tmp_path_factory.mktemp("seed") / "demo.db"
    with demo_tools.connect(path):
        pass
    return path


def address_of(client: Client) -> str:
    return client.service_client.config.target_host


# --- what a run leaves behind -------------------------------------------------------------------


@dataclass
class Outcome:
    transcript: list[dict[str, Any]]
    result: dict[str, Any] | None
    failure: dict[str, Any] | None
    db: dict[str, Any]


def db_state(db: Path) -> dict[str, Any]:
    """The database as far as the runs change it, without the times of the changes."""
    with demo_tools.connect(db) as connection:
        orders = connection.execute(
            "SELECT id, status, cancelled_at IS NOT NULL, cancel_reason FROM orders ORDER BY id"
        ).fetchall()
        refunds = connection.execute(
            "SELECT id, order_id, amount_cents, reversed_at IS NOT NULL FROM refunds ORDER BY id"
        ).fetchall()
    return {
        "orders": [tuple(row) for row in orders],
        "refunds": [tuple(row) for row in refunds],
        "outbox": [(m["id"], m["to"], m["subject"], m["body"]) for m in demo_tools.outbox(db)],
        # The key is workflow id / first run id / call id: keep the call id (and "#undo").
        "applied_calls": [
            (c["idempotency_key"].split("/", 2)[2], c["tool"], c["result"])
            for c in demo_tools.applied_calls(db)
        ],
    }


async def finish(handle: WorkflowHandle[Any, AgentResult], db: Path) -> Outcome:
    """Wait for the run's end (a worker must still be up, for the transcript query)."""
    result = failure = None
    try:
        done = await asyncio.wait_for(handle.result(), 60)
        result = done.model_dump(mode="json", include={"answer", "steps", "usage"})
    except WorkflowFailureError as error:
        assert isinstance(error.cause, ApplicationError), error.cause
        details = error.cause.details[0] if error.cause.details else {}
        failure = {
            "type": error.cause.type,
            "message": error.cause.message,
            "compensations": details.get("compensations"),
        }
    transcript = await handle.query(AgentWorkflow.transcript)
    # The pairing rule, checked again outside the workflow: every call has its one result.
    assert Transcript(messages=transcript).is_complete()
    return Outcome(
        transcript=[message.model_dump(mode="json") for message in transcript],
        result=result,
        failure=failure,
        db=db_state(db),
    )


async def start_run(
    client: Client, script: str, task_queue: str
) -> WorkflowHandle[Any, AgentResult]:
    return await client.start_workflow(
        AgentWorkflow.run,
        INPUTS[script],
        id=f"crash-{script}-{uuid.uuid4()}",
        task_queue=task_queue,
        task_timeout=ATTEMPT_TIMEOUT,
    )


async def crashed_and_taken_over(
    client: Client,
    processes: Processes,
    db: Path,
    crash_at: str,
    agent_input: AgentInput,
    name: str,
) -> WorkflowHandle[Any, AgentResult]:
    """Start `agent_input` on a worker of a queue of its own that SIGKILLs itself at
    `crash_at`, wait for the kill, then start a fresh worker that takes the run over."""
    task_queue = f"{name}-{uuid.uuid4()}"
    doomed = await processes.worker("doomed", address_of(client), task_queue, db, crash_at)
    handle = await client.start_workflow(
        AgentWorkflow.run,
        agent_input,
        id=f"{name}-{uuid.uuid4()}",
        task_queue=task_queue,
        task_timeout=ATTEMPT_TIMEOUT,
    )
    await eventually(lambda: doomed.process.poll() is not None, 60, f"the crash at {crash_at}")
    assert doomed.process.returncode == -signal.SIGKILL, doomed.output()
    await processes.worker("fresh", address_of(client), task_queue, db)
    return handle


@pytest.fixture(scope="module")
async def reference(
    temporal_env: WorkflowEnvironment, seeded_db: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, Outcome]]:
    """Each script once, on workers that never crash: what every crashed run must match."""
    directory = tmp_path_factory.mktemp("reference")
    started = Processes(directory)

    async def run(script: str) -> Outcome:
        db = directory / f"{script}.db"
        shutil.copy(seeded_db, db)
        task_queue = f"reference-{uuid.uuid4()}"
        await started.worker(script, address_of(temporal_env.client), task_queue, db)
        handle = await start_run(temporal_env.client, script, task_queue)
        return await finish(handle, db)

    try:
        outcomes = await asyncio.gather(*(run(script) for script in INPUTS))
        yield dict(zip(INPUTS, outcomes, strict=True))
    finally:
        started.kill_all()


def test_the_reference_runs_do_what_the_scripts_say(reference: dict[str, Outcome]) -> None:
    completed, compensated = reference["completes"], reference["compensates"]
    assert completed.result is not None and completed.result["answer"].startswith("Order 104999")
    assert [m[2] for m in completed.db["outbox"]] == ["Order 104999 cancelled"]
    assert [r[1:] for r in completed.db["refunds"]] == [(1042, 1000, False)]
    assert (104999, "cancelled", True, "customer asked") in completed.db["orders"]

    assert compensated.failure is not None
    assert compensated.failure["type"] == "AgentStepLimitExceeded"
    undone = [(c["compensation"], c["status"]) for c in compensated.failure["compensations"]]
    assert undone == [
        ("send_correction", "completed"),
        ("reverse_refund", "completed"),
        ("reinstate_order", "completed"),
    ]
    assert [r[1:] for r in compensated.db["refunds"]] == [(1042, 1000, True)]
    assert (104999, "processing", False, None) in compensated.db["orders"]
    # Same steps as the completed run, and then the step limit: the transcripts share a prefix.
    assert compensated.transcript == completed.transcript[:-1]


# --- killing the worker -------------------------------------------------------------------------


@dataclass(frozen=True)
class Crash:
    at: str
    """crash_worker.py's --crash-at."""
    script: str
    retried: str | None = None
    """The activity whose lost attempt the fresh worker runs again."""
    committed: str | None = None
    """The applied_calls tool whose write the database already holds when the worker dies."""


CRASHES = {
    # At the start of the third model call, after both side-effecting steps.
    "during-a-model-call": Crash("before:call_model:3", "completes", retried="call_model"),
    # The cancellation is committed with its idempotency key; the server never hears of it.
    "after-a-side-effect-committed": Crash(
        "after:cancel_order", "completes", retried="cancel_order", committed="cancel_order"
    ),
    # The same for an email, which nothing but the idempotency key keeps from going out twice.
    "after-an-email-was-queued": Crash(
        "after:send_email", "completes", retried="send_email", committed="send_email"
    ),
    # In the workflow task that follows step 2's tools: their results are in the history, the
    # third model call is not scheduled yet. The workflow task times out instead.
    "between-steps": Crash("schedule:call_model:3", "completes"),
    # The refund's reversal is committed, not reported; the email's correction went before it.
    "during-compensation": Crash(
        "after:reverse_refund",
        "compensates",
        retried="reverse_refund",
        committed="undo issue_refund",
    ),
}


async def retried_activities(handle: WorkflowHandle[Any, Any]) -> set[str]:
    """Activity types of which an attempt after the first ran."""
    history = await handle.fetch_history()
    names = {
        event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    return {
        names[event.activity_task_started_event_attributes.scheduled_event_id]
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and event.activity_task_started_event_attributes.attempt > 1
    }


async def timed_out_workflow_tasks(handle: WorkflowHandle[Any, Any]) -> int:
    history = await handle.fetch_history()
    timed_out = EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT
    return sum(event.event_type == timed_out for event in history.events)


@pytest.mark.parametrize("crash", CRASHES.values(), ids=CRASHES.keys())
async def test_a_run_survives_its_worker_being_killed(
    crash: Crash,
    client: Client,
    reference: dict[str, Outcome],
    seeded_db: Path,
    processes: Processes,
    tmp_path: Path,
) -> None:
    db = tmp_path / "demo.db"
    shutil.copy(seeded_db, db)
    task_queue = f"crash-{uuid.uuid4()}"
    doomed = await processes.worker("doomed", address_of(client), task_queue, db, crash.at)
    handle = await start_run(client, crash.script, task_queue)

    await eventually(lambda: doomed.process.poll() is not None, 30, f"the crash at {crash.at}")
    assert doomed.process.returncode == -signal.SIGKILL, doomed.output()
    assert doomed.crash_file is not None and doomed.crash_file.read_text() == crash.at
    if crash.committed is not None:
        assert crash.committed in [c[1] for c in db_state(db)["applied_calls"]]

    await processes.worker("fresh", address_of(client), task_queue, db)
    outcome = await finish(handle, db)

    expected = reference[crash.script]
    assert outcome.transcript == expected.transcript
    assert outcome.result == expected.result
    assert outcome.failure == expected.failure
    # Every effect (and every undo) applied once: the same rows as the run that never crashed.
    assert outcome.db == expected.db
    if crash.retried is not None:
        assert crash.retried in await retried_activities(handle)
    else:
        assert await timed_out_workflow_tasks(handle) >= 1


# --- restarting the server ----------------------------------------------------------------------


async def until_answered(
    what: str, attempt: Callable[[], Any], timeout: float = 30, each: float = 5
) -> Any:
    """Retry a call to the server until it answers: it may be down, or still starting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncio.wait_for(attempt(), each)
        except (RPCError, RuntimeError, TimeoutError) as error:
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not answer {what}: {error}") from error
            await asyncio.sleep(0.1)


async def test_a_run_survives_a_restart_of_the_temporal_server(
    seeded_db: Path, processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    server_command = [temporal_binary(), "server", "start-dev", "--headless"]
    server_command += ["--db-filename", str(tmp_path / "temporal.db"), "--ip", "127.0.0.1"]
    server_command += ["--port", str(port), "--log-level", "error"]
    for key in SEARCH_ATTRIBUTES:  # as WorkflowEnvironment.start_local registers them
        server_command += ["--search-attribute", f"{key.name}={key._metadata_type}"]
    processes.start("server", server_command)
    server = processes.started[-1]
    temporal = await until_answered("a connection", lambda: connect(address))

    db = tmp_path / "demo.db"
    shutil.copy(seeded_db, db)
    task_queue = f"restart-{uuid.uuid4()}"
    worker = await processes.worker("worker", address, task_queue, db)
    gate = tmp_path / "go"
    script = [
        turn(call("get_order", order_id=104999)),
        turn(call("wait_for_file", path=str(gate))),
        turn(call("cancel_order", order_id=104999, reason="customer asked")),
        turn(text="Order 104999 is cancelled."),
    ]
    handle = await temporal.start_workflow(
        AgentWorkflow.run,
        agent_input(script).model_copy(update={"tools": [*TOOLS, "wait_for_file"]}),
        id=f"restart-{uuid.uuid4()}",
        task_queue=task_queue,
    )
    # The second step's tool is running on the worker: take the server away under it.
    await eventually(Path(f"{gate}.started").exists, 30, "the tool to start")
    server.kill()
    assert server.wait(timeout=10) == -signal.SIGKILL
    processes.start("server-again", server_command)
    await until_answered("after its restart", handle.describe)
    gate.write_text("go")

    result = await until_answered("the run's result", handle.result, timeout=60, each=60)
    assert result.answer == "Order 104999 is cancelled."
    assert result.steps == 4
    transcript = await until_answered(
        "the transcript query", lambda: handle.query(AgentWorkflow.transcript)
    )
    assert Transcript(messages=transcript).is_complete()
    assert [c["tool"] for c in demo_tools.applied_calls(db)] == ["cancel_order"]
    assert worker.process.poll() is None, "the worker died during the server restart"


# --- heartbeats ---------------------------------------------------------------------------------


async def test_a_heartbeat_notices_a_dead_worker_long_before_the_attempt_timeout(
    client: Client, seeded_db: Path, processes: Processes, tmp_path: Path
) -> None:
    """The model call's attempt timeout is two minutes; the heartbeat's is one second. The lost
    attempt is retried because its heartbeat stopped, and the test finishes well within its own
    timeout only because of that."""
    db = tmp_path / "demo.db"
    shutil.copy(seeded_db, db)
    task_queue = f"heartbeat-{uuid.uuid4()}"
    slow_to_time_out = INPUTS["completes"].model_copy(
        update={
            "model": INPUTS["completes"].model.model_copy(update={"timeout_seconds": 120}),
            "heartbeat_timeout_seconds": 1.0,
        }
    )
    doomed = await processes.worker(
        "doomed", address_of(client), task_queue, db, "before:call_model:2"
    )
    handle = await client.start_workflow(
        AgentWorkflow.run,
        slow_to_time_out,
        id=f"heartbeat-{uuid.uuid4()}",
        task_queue=task_queue,
        task_timeout=ATTEMPT_TIMEOUT,
    )
    await eventually(lambda: doomed.process.poll() is not None, 30, "the crash")
    await processes.worker("fresh", address_of(client), task_queue, db)

    result = await handle.result()

    assert result.steps == len(SCRIPT)
    history = await handle.fetch_history()
    retried = [
        event.activity_task_started_event_attributes
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and event.activity_task_started_event_attributes.attempt == 2
    ]
    assert len(retried) == 1
    timeout = retried[0].last_failure.timeout_failure_info.timeout_type
    assert timeout == TimeoutType.TIMEOUT_TYPE_HEARTBEAT
