"""A fleet of workers on one PostgreSQL store: a run that moves to another machine loses nothing.

Two worker processes (tests/crash_worker.py, with the test tools), each in a working directory
of its own and with a demo database of its own, stand for two machines; they share only the
Temporal server and AGENT_STORE_URL. Worker A serves a run alone and SIGKILLs itself at the
start of one of its model calls; worker B, started only then, finishes the run. Then:

- no model call missed the store, and none went whole after step 1: every later call named
  what the earlier ones sent, as on one worker (the model inputs are the same, byte for byte,
  as a run of the same script that never moved);
- every `read_result` found its result, the one read after the move included, and the refs
  read back from a process in either worker's directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from durable_agent.activities.result_store import result_ref
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.history import STORE_MISS
from durable_agent.workflows.inputs import AgentInput, AgentResult
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import RetrySettings
from tests.helpers import TRUSTED, call, eventually, turn

ROOT = Path(__file__).resolve().parent.parent
BIG = "HEAD" + "x" * 20_000 + "TAIL"
"""What big_text(size=20000) returns: externalised to the result store."""
BIG_REF = result_ref(BIG)
ATTEMPT_TIMEOUT = timedelta(seconds=3)
"""A model call's start-to-close timeout: how soon the server gives a lost attempt to B."""

SCRIPT = [
    turn(call("big_text", size=20_000)),
    turn(call("read_result", ref=BIG_REF, offset=0, length=100)),
    *(turn(call("blob", size=2000 + n)) for n in range(5)),
    turn(call("read_result", ref=BIG_REF, offset=19_990, length=100)),
    turn(text="done: HEAD to TAIL"),
]


def agent_input() -> AgentInput:
    return AgentInput(
        prompt="Page through the big text.",
        tools=["big_text", "blob"],
        model=ModelSettings(
            provider="scripted",
            script=SCRIPT,
            timeout_seconds=ATTEMPT_TIMEOUT.total_seconds(),
            retry=RetrySettings(maximum_attempts=10, initial_interval_seconds=0.1),
        ),
        tool_approval=TRUSTED,
    )


class Machines:
    """Worker processes, each in a directory of its own; whatever is left is killed at the end."""

    def __init__(self, directory: Path, store_url: str, address: str, task_queue: str) -> None:
        self.directory = directory
        self.store_url = store_url
        self.address = address
        self.task_queue = task_queue
        self.started: list[subprocess.Popen[bytes]] = []

    def env(self, home: Path) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"AGENT_MESSAGE_STORE", "AGENT_RESULT_STORE", "AGENT_PAYLOAD_KEYS"}
        }
        env.update(
            AGENT_STORE_URL=self.store_url,
            AGENT_DEMO_DB=str(home / "demo.db"),
            PYTHONPATH=str(ROOT),
            PYTHONDONTWRITEBYTECODE="1",
        )
        return env

    async def worker(self, name: str, crash_at: str | None = None) -> Path:
        """Start worker `name` in its own directory; return that directory once it polls."""
        home = self.directory / name
        home.mkdir()
        ready = home / "ready"
        command = [
            sys.executable,
            "-c",
            "import tests.tools_for_tests, tests.crash_worker as worker; worker.main()",
            "--address",
            self.address,
            "--task-queue",
            self.task_queue,
            "--ready-file",
            str(ready),
        ]
        if crash_at is not None:
            command += ["--crash-at", crash_at, "--crash-file", str(home / "crashed")]
        log = home / "worker.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=home, env=self.env(home), stdout=out, stderr=subprocess.STDOUT
            )
        self.started.append(process)
        await eventually(
            lambda: ready.exists() or process.poll() is not None, 60, f"{name} to poll"
        )
        assert ready.exists(), f"{name} died before polling:\n{log.read_text()[-3000:]}"
        return home

    def read_back(self, home: Path, ref: str) -> str | None:
        """The result `ref` as a fresh process in `home` reads it (its own store, as a worker
        there would open it)."""
        code = (
            "import sys\nfrom durable_agent.activities.result_store import result_store\n"
            "text = result_store().get(sys.argv[1])\n"
            "print('' if text is None else len(text))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, ref],
            cwd=home,
            env=self.env(home),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip() or None

    def kill_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)


@pytest.fixture
def machines(tmp_path: Path, store_url: str, client: Client, task_queue: str) -> Iterator[Machines]:
    started = Machines(tmp_path, store_url, client.service_client.config.target_host, task_queue)
    try:
        yield started
    finally:
        started.kill_all()


async def history_of(handle: WorkflowHandle[Any, Any]) -> Any:
    return await handle.fetch_history()


def model_inputs(history: Any) -> list[dict[str, Any]]:
    return [
        json.loads(event.activity_task_scheduled_event_attributes.input.payloads[0].data)
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and event.activity_task_scheduled_event_attributes.activity_type.name == "call_model"
    ]


def failure_types(history: Any) -> list[str]:
    return [
        event.activity_task_failed_event_attributes.failure.application_failure_info.type
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
    ]


def model_call_workers(history: Any) -> list[str]:
    """The identity of the worker each model call attempt that was started ran on."""
    scheduled = {
        event.event_id: event.activity_task_scheduled_event_attributes.activity_type.name
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    return [
        event.activity_task_started_event_attributes.identity
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and scheduled[event.activity_task_started_event_attributes.scheduled_event_id]
        == "call_model"
    ]


def history_bytes(history: Any) -> int:
    return sum(event.ByteSize() for event in history.events)


async def tool_results(handle: WorkflowHandle[Any, AgentResult]) -> dict[str, str]:
    transcript = await handle.query(AgentWorkflow.transcript)
    return {m.tool_call_id: m.content for m in transcript if m.role == "tool"}


async def run(client: Client, task_queue: str, name: str) -> WorkflowHandle[Any, AgentResult]:
    return await client.start_workflow(
        AgentWorkflow.run,
        agent_input(),
        id=f"fleet-{name}-{uuid.uuid4()}",
        task_queue=task_queue,
    )


@pytest.mark.parametrize(
    "crash_at",
    [
        # After the run's first model call: the one request that names nothing by reference.
        "before:call_model:2",
        # Mid-run, with an externalised result and several stored tool results behind it.
        "before:call_model:6",
    ],
)
@pytest.mark.timeout(240)
async def test_a_run_moves_to_another_machine_and_loses_nothing(
    machines: Machines, client: Client, task_queue: str, crash_at: str
) -> None:
    home_a = await machines.worker("a", crash_at=crash_at)
    moved = await run(client, task_queue, "moved")
    await eventually(lambda: (home_a / "crashed").exists(), 60, "worker A to crash")
    home_b = await machines.worker("b")
    result = await moved.result()

    assert result.answer == "done: HEAD to TAIL"
    history = await history_of(moved)
    assert STORE_MISS not in failure_types(history), "a model call missed the shared store"
    inputs = model_inputs(history)
    assert len(inputs) == len(SCRIPT), "no model call went again whole"
    assert all(i["prefix_ref"] and len(i["messages"]) == 2 for i in inputs[1:])
    # (Step 2 offers read_result as well, so its tool list goes whole, once.)
    assert all(i["tools_ref"] for i in inputs[2:])
    workers = model_call_workers(history)
    crashed_at = int(crash_at.rsplit(":", 1)[1])
    assert len(set(workers[: crashed_at - 1])) == 1, "A served the calls before the crash"
    assert set(workers[crashed_at - 1 :]).isdisjoint(workers[: crashed_at - 1]), "B the rest"

    results = await tool_results(moved)
    first, late = json.loads(results["call_2_1"]), json.loads(results["call_8_1"])
    assert first["found"] and first["text"] == BIG[:100]
    assert late["found"] and late["text"] == BIG[19_990:20_090], "read on B what A stored"
    assert (
        machines.read_back(home_a, BIG_REF) == machines.read_back(home_b, BIG_REF) == str(len(BIG))
    )

    # The same script on one worker that never moved: the same model inputs, byte for byte.
    still = await run(client, task_queue, "still")
    assert (await still.result()).answer == result.answer
    still_history = await history_of(still)
    assert model_inputs(still_history) == inputs
    assert failure_types(still_history) == []
    moved_bytes, still_bytes = history_bytes(history), history_bytes(still_history)
    print(
        f"\n{crash_at}: {len(SCRIPT)} steps; model inputs {sum(len(json.dumps(i)) for i in inputs)}"
        f" bytes either way; history {moved_bytes} bytes moved ({moved_bytes / len(SCRIPT):.0f}"
        f" a step), {still_bytes} on one worker ({still_bytes / len(SCRIPT):.0f} a step)"
    )
