"""Fault injection: runs with side-effecting tools while workers are SIGKILLed and runs cancelled.

    python -m bench.faults [--runs 100] [--kills 35] [--cancels 25] [--seed N] [--json PATH]
    python -m bench.faults --lost-task-attempts N

The second form measures one thing only: how the server spaces the attempts of a workflow task
lost N times in a row (each worker kills itself in the run's `resolve_tools`); see
`measure_lost_attempts` and docs/testing.md.

One embedded dev server; worker processes from `tests/crash_worker.py`, one at a time, each
killed with SIGKILL and replaced by a fresh one; the real `openai` SDK in the model activity,
talking (OPENAI_BASE_URL) to the local fake of the API, `tests/fake_openai.py`, which answers
400 to any request that breaks the tool-call pairing rule.

Each run cancels one order, refunds part of it and emails the customer (the demo's SQLite tools,
each effect recorded under its idempotency key in `applied_calls`), with read-only calls beside
them, then answers. The fake plays each run's conversation from the run's tag in the prompt and
the number of assistant messages in the request, so a retried or replayed call gets the same
reply; it answers after a short delay, and a share of first requests gets a 503 or a reset
connection. Some runs have a step limit below their script's length: they fail and undo their
effects. `--cancels` runs get `handle.cancel()` at a random moment.

The kills: `--kills` times, a worker is killed, either from outside (os.kill at a random moment
while runs are in flight) or by itself at a named point (crash_worker's `--crash-at`, chosen at
random: before or after a model call, after a tool's write committed and before its result was
reported, while the workflow schedules its next activity, during a compensation). A fresh worker
then takes over, and after the last kill one worker serves to the end.

The seed fixes the plan: the scripts, the limits, which runs are cancelled and when, the kinds of
kill, their points and delays, the fake's delays and faults. Where a kill lands in a run depends
on timing as well, so a failing seed re-run may land elsewhere: the report names each violating
run's workflow id and prints an excerpt of its history.

Checked at the end (each a count of violations; the exit status is 1 unless all are 0):

- every run ended COMPLETED, FAILED with a named AgentError and its compensation record, or
  CANCELED;
- no effect applied twice: per run, no tool's effects outnumber its calls in the script, and the
  database holds one row (a refund, an email, a correction) per recorded effect;
- no applied effect unlisted: each one belongs to a COMPLETED run's `side_effects`, or was undone
  (a compensation the run recorded, or for a CANCELED run one its history shows completed, and
  its `#undo` key in `applied_calls`), or is listed as not undone (failed or no compensation);
- the database agrees with that: an order is cancelled exactly when its cancellation is kept, a
  refund reversed exactly when it was undone, a correction sent exactly when the email was;
- every request the fake received keeps the pairing rule, is on its run's script, and carries
  the same result for a call as the run's earlier requests did; every final transcript (queried)
  is complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.api.enums.v1 import EventType, PendingWorkflowTaskState, TimeoutType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.service import RPCError

import durable_agent.workflows.tool_catalog as tool_catalog
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentError
from durable_agent.workflows.inputs import AgentInput, AgentResult, Limits, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.state import CompensationInput, FailureDetails
from durable_agent.workflows.transcript import Transcript
from tests import fake_openai

ROOT = Path(__file__).resolve().parent.parent
TASK_QUEUE = "bench-faults"
API_KEY = "sk-test-fake"
MODEL = "gpt-fake-faults"
SYSTEM = "You are the support agent of a small shop. Do what the customer asks, then say so."
TOOLS = ["get_order", "get_customer", "get_tracking", "cancel_order", "issue_refund", "send_email"]
CUSTOMER = "bulk@b.com"
FIRST_ORDER = demo_tools.BULK_FIRST_ID
"""Run i works on order FIRST_ORDER + i, made cancellable before the runs start."""
EFFECT_MARKS = {"cancel_order": "cancelled", "issue_refund": "refunded", "send_email": "sent"}
"""The field of a side-effecting tool's result that says the effect happened."""
COMPENSATIONS = {
    "reinstate_order": "cancel_order",
    "reverse_refund": "issue_refund",
    "send_correction": "send_email",
}
AGENT_ERRORS = frozenset(cls.__name__ for cls in AgentError.__subclasses__())
ENDINGS = ("COMPLETED", "FAILED", "CANCELED")
TASK_TIMEOUT = timedelta(seconds=3)
"""A workflow task lost with its worker goes to the next worker after this long."""
MODEL_RETRY = RetrySettings(
    maximum_attempts=10,
    initial_interval_seconds=0.1,
    backoff_coefficient=1.5,
    maximum_interval_seconds=1.0,
)
HEARTBEAT_SECONDS = 2.0
"""A model, tool or compensation attempt lost with its worker is retried after this long."""
RUN_TIMEOUT_SECONDS = 300.0
STALL_SECONDS = 60.0
"""A run this slow has its history printed even when it broke nothing."""

CRASH_POINTS = (
    # (point, weight): crash_worker.py's --crash-at without its count, which is drawn 1..3.
    ("before:call_model", 3),
    ("after:call_model", 2),
    ("schedule:call_model", 2),
    ("before:cancel_order", 1),
    ("after:cancel_order", 2),
    ("after:issue_refund", 2),
    ("after:send_email", 2),
    ("schedule:send_email", 1),
    ("after:get_order", 1),
    ("after:reinstate_order", 1),
    ("after:reverse_refund", 1),
    ("after:send_correction", 1),
)


# --- the plan -----------------------------------------------------------------------------------


@dataclass
class PlannedCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class PlannedReply:
    calls: list[PlannedCall]
    text: str | None = None
    delay_seconds: float = 0.0
    """How long the fake takes to answer."""
    fault: str | None = None
    """"503" or "hangup": what the first request for this reply gets instead."""


@dataclass
class RunPlan:
    index: int
    workflow_id: str
    order_id: int
    subject: str
    replies: list[PlannedReply]
    max_steps: int
    start_after: float
    cancel_after: float | None = None

    @property
    def tag(self) -> str:
        return f"[{self.workflow_id}]"

    @property
    def intent(self) -> str:
        if self.cancel_after is not None:
            return "cancel"
        return "complete" if self.max_steps >= len(self.replies) else "limit"

    def scripted(self) -> Counter[str]:
        """Calls of each tool in the script."""
        return Counter(call.name for reply in self.replies for call in reply.calls)

    def agent_input(self) -> AgentInput:
        return AgentInput(
            prompt=f"{self.tag} Cancel order {self.order_id}, refund part of it and tell "
            f"{CUSTOMER}.",
            label="faults",
            system=SYSTEM,
            tools=TOOLS,
            model=ModelSettings(
                provider="openai", model=MODEL, timeout_seconds=5.0, retry=MODEL_RETRY
            ),
            limits=Limits(max_steps=self.max_steps),
            tool_approval=ToolApprovalPolicy(approve_all=True),  # nobody waits for a person
            heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
        )


def plan_runs(
    seed: int, runs: int, cancels: int, spacing: float, provider_fault_rate: float
) -> list[RunPlan]:
    """Every run's script, limit, start and cancel, from the seed alone."""
    rng = random.Random(f"{seed}/plan")
    plans = []
    for index in range(runs):
        order_id = FIRST_ORDER + index
        subject = f"Order {order_id} cancelled (fault run {index})"
        amount = rng.choice([1.0, 2.5, 4.0])
        cancel = ("cancel_order", {"order_id": order_id, "reason": "customer asked"})
        refund = ("issue_refund", {"order_id": order_id, "amount": amount})
        email = (
            "send_email",
            {
                "to": CUSTOMER,
                "subject": subject,
                "body": f"Order {order_id} is cancelled and {amount:.2f} USD refunded.",
            },
        )
        if rng.random() < 0.5:
            replies = [
                _reply(
                    ("get_order", {"order_id": order_id}),
                    ("get_customer", {"email": CUSTOMER}),
                    step=1,
                ),
                _reply(cancel, step=2),
                _reply(refund, ("get_tracking", {"order_id": order_id}), step=3),
                _reply(email, step=4),
            ]
        else:  # two effects in one reply: they run one at a time, in order
            replies = [
                _reply(("get_order", {"order_id": order_id}), step=1),
                _reply(cancel, refund, step=2),
                _reply(email, ("get_customer", {"email": CUSTOMER}), step=3),
            ]
        replies.append(PlannedReply([], text=f"Order {order_id} is cancelled and refunded."))
        for planned in replies:
            planned.delay_seconds = round(rng.uniform(0.1, 0.8), 2)
            if rng.random() < provider_fault_rate:
                planned.fault = rng.choice(["503", "hangup"])
        # A third of the runs stop at a step limit after one, two or all of their effects.
        limited = rng.random() < 1 / 3
        max_steps = rng.randint(2, len(replies) - 1) if limited else 10
        start_after = round(index * spacing + rng.uniform(0, spacing / 2), 2)
        plans.append(
            RunPlan(
                index=index,
                workflow_id=f"faults-{seed}-{index:03d}",
                order_id=order_id,
                subject=subject,
                replies=replies,
                max_steps=max_steps,
                start_after=start_after,
            )
        )
    for plan in rng.sample(plans, min(cancels, runs)):
        # Somewhere in the run's length without faults: the fake's delays, and about 0.3 s a
        # step for the rest. Kills stretch a run, so some cancels land late in it.
        pace = sum(reply.delay_seconds + 0.3 for reply in plan.replies)
        plan.cancel_after = round(rng.uniform(0.1, 1.0) * pace, 2)
    return plans


def _reply(*calls: tuple[str, dict[str, Any]], step: int) -> PlannedReply:
    return PlannedReply(
        [PlannedCall(f"call_{step}_{n + 1}", name, args) for n, (name, args) in enumerate(calls)]
    )


# --- the provider -------------------------------------------------------------------------------


_TAG = re.compile(r"^\[(faults-[^\]]+)\]")


class ConversationFake(fake_openai.FakeOpenAI):
    """tests/fake_openai.py, every check of it kept (the key, the pairing rule's 400), with each
    reply taken from the run's plan instead of one shared list: the run from the tag that starts
    its prompt, the step from the assistant messages in the request."""

    def __init__(self, plans: list[RunPlan]) -> None:
        super().__init__(api_key=API_KEY)
        self.plans = {plan.workflow_id: plan for plan in plans}
        self.asked: Counter[tuple[str, int]] = Counter()
        self.faults_injected = 0
        self.off_script: list[str] = []
        self.cut_off = 0
        """Requests whose body stopped short of its content-length: the sender died sending."""
        self.script = _PlannedScript(self)

    def answer(
        self, path: str, headers: dict[str, str], raw: bytes
    ) -> fake_openai.HttpReply | fake_openai.Hangup:
        if len(raw) < int(headers.get("content-length") or 0):
            # A worker killed while it sent the request. No provider answers (or bills) a
            # request it did not receive whole, so this one is not counted as received.
            with self._lock:
                self.cut_off += 1
            return fake_openai.Hangup()
        return super().answer(path, headers, raw)

    def next_entry(self) -> Any:
        """The entry for the request being answered: the parent took it under its lock, after
        checking the key and the pairing rule, just after recording the request."""
        body = self.requests[-1].body or {}
        messages = body.get("messages", [])
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        match = _TAG.match(user)
        plan = self.plans.get(match.group(1)) if match else None
        step = 1 + sum(m.get("role") == "assistant" for m in messages)
        if plan is None or step > len(plan.replies):
            what = f"request #{len(self.requests)}: {user[:40]!r}, step {step}"
            self.off_script.append(what)
            return fake_openai.error(400, f"fake: off the script ({what})")
        planned = plan.replies[step - 1]
        self.asked[(plan.workflow_id, step)] += 1
        if planned.fault is not None and self.asked[(plan.workflow_id, step)] == 1:
            self.faults_injected += 1
            if planned.fault == "hangup":
                return fake_openai.Hangup()
            return fake_openai.error(503, "The engine is currently overloaded", type="server_error")
        reply = fake_openai.Reply(
            planned.text,
            tool_calls=[(c.id, c.name, json.dumps(c.arguments)) for c in planned.calls],
        )
        return fake_openai.Slow(planned.delay_seconds, reply)


class _PlannedScript:
    """Stands in for the fake's list of entries: never empty, and `pop` plays the plan."""

    def __init__(self, fake: ConversationFake) -> None:
        self.fake = fake

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        return 0

    def pop(self, index: int = -1) -> Any:
        return self.fake.next_entry()


def check_requests(fake: ConversationFake) -> dict[str, list[str]]:
    """Every request the fake received: the pairing rule, and the same result text for a call in
    every request of its run that carries it."""
    broken, inconsistent = [], []
    seen: dict[tuple[str, str], str] = {}
    for number, request in enumerate(fake.requests, 1):
        messages = (request.body or {}).get("messages", [])
        if fake_openai.pairing_error(messages) is not None:
            broken.append(f"request #{number} breaks the pairing rule")
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        match = _TAG.match(user)
        tag = match.group(1) if match else "?"
        for message in messages:
            if message.get("role") != "tool":
                continue
            key = (tag, message.get("tool_call_id", ""))
            content = message.get("content") or ""
            if not content:
                inconsistent.append(f"request #{number}: {key} has an empty result")
            elif seen.setdefault(key, content) != content:
                inconsistent.append(f"request #{number}: {key} carries another result than before")
    return {
        "pairing rule broken": broken,
        "off the script": list(fake.off_script),
        "a result changed between requests": inconsistent,
    }


# --- the workers --------------------------------------------------------------------------------


@dataclass
class Kill:
    at_seconds: float
    kind: str
    """"outside" (os.kill) or "point" (the worker at its --crash-at)."""
    point: str | None = None
    note: str | None = None
    cached: bool = False
    """The killed worker had a workflow cache (and a sticky queue)."""


class Workers:
    """Worker processes on one task queue, one alive at a time; kills them as planned. Each one
    is drawn with a workflow cache, as in production (a killed worker's sticky queue then holds
    its runs' next tasks until the server gives up on it: the SDK's sticky schedule-to-start
    timeout, 10 s), or without one, as the crash tests run (every task goes to whichever worker
    is alive, and replays from the start; such a worker also drops a task whose local activity
    is in flight when another run's task arrives, see docs/testing.md)."""

    def __init__(
        self,
        directory: Path,
        address: str,
        env: dict[str, str],
        seed: int,
        kills: int,
        cached_share: float,
    ) -> None:
        self.directory = directory
        self.address = address
        self.env = env
        self.rng = random.Random(f"{seed}/kills")
        self.kills_left = kills
        self.kills: list[Kill] = []
        self.started = 0
        self.current: subprocess.Popen[bytes] | None = None
        self.current_point: str | None = None
        self.current_cached = False
        self.cached_share = cached_share
        self.cached_started = 0
        self.clock = time.monotonic()

    async def start(self, crash_at: str | None = None) -> subprocess.Popen[bytes]:
        self.started += 1
        name = f"worker-{self.started:03d}"
        ready = self.directory / f"{name}.ready"
        command = [sys.executable, "-m", "tests.crash_worker", "--address", self.address]
        command += ["--task-queue", TASK_QUEUE, "--ready-file", str(ready)]
        cached = self.rng.random() < self.cached_share
        if cached:
            command += ["--max-cached-workflows", "1000"]
            self.cached_started += 1
        if crash_at is not None:
            command += [
                "--crash-at",
                crash_at,
                "--crash-file",
                str(self.directory / f"{name}.crashed"),
            ]
        with (self.directory / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        self.current, self.current_point, self.current_cached = process, crash_at, cached
        deadline = time.monotonic() + 60
        while not ready.exists():
            if process.poll() is not None:
                if crash_at is not None and process.returncode == -signal.SIGKILL:
                    return process  # it reached its point before it wrote the ready file
                log_text = (self.directory / f"{name}.log").read_text(errors="replace")
                raise RuntimeError(f"{name} died before polling:\n{log_text[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not poll within 60 s")
            await asyncio.sleep(0.05)
        return process

    def now(self) -> float:
        return round(time.monotonic() - self.clock, 2)

    def draw_point(self) -> str:
        points, weights = zip(*CRASH_POINTS, strict=True)
        point = self.rng.choices(points, weights)[0]
        return f"{point}:{self.rng.randint(1, 3)}"

    async def run(
        self, in_flight: Callable[[], bool], done: asyncio.Event, ready: asyncio.Event
    ) -> None:
        """Keep a worker up until `done`, killing each of the first `kills` workers; `ready` is
        set once the first one polls."""
        while not done.is_set():
            if self.kills_left == 0:
                await self.start()
                ready.set()
                await done.wait()
                break
            point = self.draw_point() if self.rng.random() < 0.5 else None
            # From outside: a moment 0.5 to 4 s after it polls. At a point: if the runs do not
            # reach it within 3 to 8 s, from outside then.
            wait = self.rng.uniform(0.5, 4.0) if point is None else self.rng.uniform(3.0, 8.0)
            process = await self.start(point)
            if not ready.is_set():
                self.clock = time.monotonic()  # the kills' times count from here, as the runs'
                ready.set()
            note = None
            if point is None:
                await _sleep(wait, done)
            elif await _wait_for(_exited(process), wait, done):
                self.kills.append(Kill(self.now(), "point", point, cached=self.current_cached))
                self.kills_left -= 1
                continue
            else:
                note = f"{point} not reached in {wait:.1f} s"
            await _wait_for(in_flight, RUN_TIMEOUT_SECONDS, done)
            if done.is_set():
                break
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait()
                self.kills.append(Kill(self.now(), "outside", point, note, self.current_cached))
            else:  # it reached its point meanwhile
                self.kills.append(Kill(self.now(), "point", point, cached=self.current_cached))
            self.kills_left -= 1
        # The runs have ended: whatever queries the report makes go to a worker that stays up.
        if self.current_point is not None:
            self.stop()
        if self.current is None or self.current.poll() is not None:
            await self.start()

    def stop(self) -> None:
        if self.current is not None and self.current.poll() is None:
            self.current.kill()
            self.current.wait()


def _exited(process: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: process.poll() is not None


async def _sleep(seconds: float, done: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), seconds)


async def _wait_for(check: Callable[[], bool], timeout: float, done: asyncio.Event) -> bool:
    """True once `check()` holds; False after `timeout` or once `done` is set."""
    deadline = time.monotonic() + timeout
    while not check():
        if done.is_set() or time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


# --- the runs -----------------------------------------------------------------------------------


@dataclass
class Driven:
    plan: RunPlan
    handle: WorkflowHandle[Any, AgentResult] | None = None
    result: AgentResult | None = None
    error: BaseException | None = None
    cancel: str | None = None
    """What came of the planned cancel: "sent at N s" or why it was not."""
    done: bool = False
    seconds: float = 0.0
    """From the start to the end the client saw."""


async def drive(client: Client, driven: Driven, ready: asyncio.Event) -> None:
    plan = driven.plan
    await ready.wait()  # the plan's start times count from the first worker's
    await asyncio.sleep(plan.start_after)
    handle = await client.start_workflow(
        AgentWorkflow.run,
        plan.agent_input(),
        id=plan.workflow_id,
        task_queue=TASK_QUEUE,
        task_timeout=TASK_TIMEOUT,
    )
    driven.handle = handle
    started = time.monotonic()
    canceller = None
    if plan.cancel_after is not None:

        async def cancel(after: float) -> None:
            await asyncio.sleep(after)
            if driven.done:
                driven.cancel = "not sent: the run had ended"
                return
            try:
                await handle.cancel()
                driven.cancel = f"sent {after:g} s after the start"
            except RPCError as error:
                driven.cancel = f"refused: {error.message[:80]}"

        canceller = asyncio.create_task(cancel(plan.cancel_after))
    try:
        driven.result = await asyncio.wait_for(handle.result(), RUN_TIMEOUT_SECONDS)
    except WorkflowFailureError as failure:
        driven.error = failure.cause
    except TimeoutError as timeout:
        driven.error = timeout
    finally:
        driven.done = True
        driven.seconds = round(time.monotonic() - started, 2)
        if canceller is not None:
            await canceller


# --- what the runs left behind ------------------------------------------------------------------


@dataclass
class RunRecord:
    """One run as the checks see it."""

    workflow_id: str
    status: str
    """The execution's status: COMPLETED, FAILED, CANCELED, RUNNING, ..."""
    order_id: int
    subject: str
    scripted: dict[str, int]
    """Calls of each tool in the run's script."""
    error_type: str | None = None
    error_message: str | None = None
    has_failure_details: bool = False
    kept: list[str] = field(default_factory=list)
    """Call ids of the effects in a COMPLETED run's `side_effects`."""
    compensations: dict[str, str] = field(default_factory=dict)
    """Call id -> completed, failed or not_undone: a FAILED run's compensation record; for a
    CANCELED run (whose error carries none), the compensation activities of its history."""
    outcome_unknown: int = 0
    """Effects the run undid without knowing whether they had happened (their call was cut off
    after it started): the compensation looked them up by their key."""
    transcript_complete: bool = True
    seconds: float = 0.0
    intent: str = ""
    """What the plan meant: complete, limit (fail at the step limit) or cancel."""
    cancel: str | None = None
    """What came of the planned cancel (see Driven.cancel)."""
    outlived_wait: bool = False
    """The run had not ended when the harness stopped waiting (RUN_TIMEOUT_SECONDS); if it has
    ended since, it is checked by how it ended."""

    @property
    def cancel_sent(self) -> bool:
        return bool(self.cancel and self.cancel.startswith("sent"))


@dataclass
class DatabaseState:
    applied: list[dict[str, Any]]
    """demo_tools.applied_calls(): idempotency_key, tool, result."""
    order_status: dict[int, str]
    refunds: dict[int, list[bool]]
    """Order id -> one entry per refund row: whether it is reversed."""
    emails: dict[str, int]
    """Subject -> emails in the outbox."""


def read_database(path: Path, order_ids: list[int]) -> DatabaseState:
    with demo_tools.connect(path) as connection:
        marks = ",".join("?" * len(order_ids))
        statuses = connection.execute(
            f"SELECT id, status FROM orders WHERE id IN ({marks})", order_ids
        ).fetchall()
        refund_rows = connection.execute(
            f"SELECT order_id, reversed_at IS NOT NULL FROM refunds WHERE order_id IN ({marks})"
            " ORDER BY id",
            order_ids,
        ).fetchall()
        subjects = connection.execute(
            "SELECT subject, COUNT(*) FROM outbox GROUP BY subject"
        ).fetchall()
    refunds: dict[int, list[bool]] = {}
    for order_id, reversed_ in refund_rows:
        refunds.setdefault(order_id, []).append(bool(reversed_))
    return DatabaseState(
        applied=demo_tools.applied_calls(path),
        order_status={row[0]: row[1] for row in statuses},
        refunds=refunds,
        emails={row[0]: row[1] for row in subjects},
    )


async def compensations_in_history(
    client: Client, handle: WorkflowHandle[Any, Any]
) -> tuple[dict[str, str], int]:
    """Call id -> completed or failed, for each compensation activity the run scheduled; and how
    many of them undid an effect of unknown outcome."""
    history = await handle.fetch_history()
    scheduled: dict[int, str] = {}
    outcome: dict[str, str] = {}
    unknown = 0
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name in COMPENSATIONS:
                [undo] = await client.data_converter.decode(
                    attributes.input.payloads, [CompensationInput]
                )
                scheduled[event.event_id] = undo.tool_call_id
                outcome[undo.tool_call_id] = "failed"
                unknown += undo.outcome_unknown
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            call_id = scheduled.get(
                event.activity_task_completed_event_attributes.scheduled_event_id
            )
            if call_id is not None:
                outcome[call_id] = "completed"
    return outcome, unknown


async def history_excerpt(handle: WorkflowHandle[Any, Any], limit: int = 80) -> list[str]:
    """The run's events, one line each, with the seconds since it started and the activities
    named: for the report of a violation or a stall."""
    history = await handle.fetch_history()
    names: dict[int, str] = {}
    lines = []
    start = history.events[0].event_time.ToDatetime() if history.events else None
    for event in history.events:
        kind = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        offset = (event.event_time.ToDatetime() - start).total_seconds() if start else 0.0
        line = f"{event.event_id} +{offset:.1f}s {kind}"
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names[event.event_id] = (
                event.activity_task_scheduled_event_attributes.activity_type.name
            )
            line += f" {names[event.event_id]}"
        line += _workflow_task_note(event)
        for attribute in (
            "activity_task_started_event_attributes",
            "activity_task_completed_event_attributes",
            "activity_task_failed_event_attributes",
            "activity_task_timed_out_event_attributes",
            "activity_task_canceled_event_attributes",
        ):
            if event.HasField(attribute):
                attributes = getattr(event, attribute)
                line += f" {names.get(attributes.scheduled_event_id, '?')}"
                if attribute.startswith("activity_task_started"):
                    line += f" attempt {attributes.attempt}"
                if attribute.startswith("activity_task_failed"):
                    line += f": {attributes.failure.message[:100]}"
        lines.append(line)
    return lines[-limit:]


def _workflow_task_note(event: Any) -> str:
    """What a workflow task event hides: a retried task's attempt and timeout (the server writes
    attempts 2 to N-1 of a failing task nowhere, and only the one that completes, attempt N, is
    recorded, at its own time), and which timeout a timed-out task hit."""
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
        attributes = event.workflow_task_scheduled_event_attributes
        if attributes.attempt > 1:
            timeout = attributes.start_to_close_timeout.ToTimedelta().total_seconds()
            return f" attempt {attributes.attempt} (timeout {timeout:.1f}s)"
    if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
        kind = event.workflow_task_timed_out_event_attributes.timeout_type
        if kind == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START:
            return " (schedule-to-start: a sticky queue nobody polled)"
    return ""


async def record_of(client: Client, driven: Driven) -> RunRecord:
    plan = driven.plan
    record = RunRecord(
        workflow_id=plan.workflow_id,
        status="NOT STARTED",
        order_id=plan.order_id,
        subject=plan.subject,
        scripted=dict(plan.scripted()),
        intent=plan.intent,
        cancel=driven.cancel,
        seconds=driven.seconds,
    )
    handle = driven.handle
    if handle is None:
        return record
    description = await handle.describe()
    record.status = description.status.name if description.status else "UNKNOWN"
    if isinstance(driven.error, TimeoutError):
        record.outlived_wait = True
        if record.status in ENDINGS:  # it ended after the harness stopped waiting: read how
            try:
                driven.result, driven.error = await handle.result(), None
            except WorkflowFailureError as failure:
                driven.error = failure.cause
    if driven.result is not None:
        record.kept = [effect.call.tool_call_id for effect in driven.result.side_effects]
    error = driven.error
    if isinstance(error, ApplicationError):
        record.error_type = error.type
        record.error_message = error.message[:300]
        if error.details and isinstance(error.details[0], dict):
            record.has_failure_details = True
            details = FailureDetails.of_error(error)
            record.compensations = {c.tool_call_id: c.status for c in details.compensations}
            record.outcome_unknown = sum(c.outcome_unknown for c in details.compensations)
    elif isinstance(error, CancelledError):
        record.error_type = "CancelledError"
        record.compensations, record.outcome_unknown = await compensations_in_history(
            client, handle
        )
    elif error is not None:
        record.error_type = type(error).__name__
        record.error_message = str(error)[:300]
    return record


# --- the checks ---------------------------------------------------------------------------------

INVARIANTS = (
    "run ended otherwise",
    "effect applied twice",
    "effect unlisted",
    "database disagrees with the record",
    "invalid provider request",
    "final transcript incomplete",
)


@dataclass
class Verdict:
    effects_applied: int = 0
    effects_kept: int = 0
    effects_undone: int = 0
    effects_listed_not_undone: int = 0
    violations: dict[str, list[str]] = field(
        default_factory=lambda: {name: [] for name in INVARIANTS}
    )

    def flag(self, invariant: str, what: str) -> None:
        self.violations[invariant].append(what)

    @property
    def broken(self) -> int:
        return sum(len(found) for found in self.violations.values())


def _happened(tool: str, result: Any) -> bool:
    return isinstance(result, dict) and bool(result.get(EFFECT_MARKS[tool]))


def check(
    runs: list[RunRecord], database: DatabaseState, requests: dict[str, list[str]] | None = None
) -> Verdict:
    """The invariants over what the runs left: pure, so a test can hand it a broken world."""
    verdict = Verdict()
    by_id = {run.workflow_id: run for run in runs}
    # Effects the database holds, by run: call id -> tool; and the keys that were undone.
    effects: dict[str, dict[str, str]] = {}
    undone_keys: set[str] = set()
    for row in database.applied:
        key = row["idempotency_key"]
        if key.endswith("#undo"):
            undone_keys.add(key.removesuffix("#undo"))
            continue
        if row["tool"] in EFFECT_MARKS and _happened(row["tool"], row["result"]):
            workflow_id, _, call_id = key.split("/", 2)
            effects.setdefault(workflow_id, {})[call_id] = row["tool"]
    keys: dict[tuple[str, str], str] = {}
    for row in database.applied:
        key = row["idempotency_key"]
        if not key.endswith("#undo"):
            workflow_id, _, call_id = key.split("/", 2)
            keys[(workflow_id, call_id)] = key

    for workflow_id in sorted(set(effects) - set(by_id)):
        for call_id, tool in effects[workflow_id].items():
            verdict.flag("effect unlisted", f"{workflow_id} {tool} {call_id}: no such run")

    for run in runs:
        wid = run.workflow_id
        if run.cancel_sent and run.status == "FAILED" and "cancel" in (run.error_message or ""):
            # docs/side-effects.md: a cancel ends the run CANCELED wherever it lands, never
            # FAILED. (A run that failed on its own, a step limit say, before the cancel came
            # may end FAILED: only a failure that names the cancel as its cause is flagged.)
            verdict.flag(
                "run ended otherwise",
                f"{wid}: cancelled ({run.cancel}), yet FAILED with {run.error_type}: "
                f"{run.error_message}",
            )
        if run.status not in ENDINGS:
            verdict.flag("run ended otherwise", f"{wid}: {run.status}")
        elif run.status == "FAILED" and (
            run.error_type not in AGENT_ERRORS or not run.has_failure_details
        ):
            verdict.flag(
                "run ended otherwise",
                f"{wid}: FAILED with {run.error_type}"
                + ("" if run.has_failure_details else ", no compensation record"),
            )
        if not run.transcript_complete:
            verdict.flag("final transcript incomplete", wid)

        applied = effects.get(wid, {})
        per_tool = Counter(applied.values())
        for tool, applied_count in per_tool.items():
            if applied_count > run.scripted.get(tool, 0):
                verdict.flag(
                    "effect applied twice",
                    f"{wid}: {tool} applied {applied_count} times, scripted "
                    f"{run.scripted.get(tool, 0)}",
                )
        fate: dict[str, str] = {}  # tool -> kept | undone | listed (the last effect of it)
        for call_id, tool in sorted(applied.items()):
            verdict.effects_applied += 1
            was_undone = keys.get((wid, call_id)) in undone_keys
            if run.status == "COMPLETED":
                if call_id not in run.kept:
                    verdict.flag("effect unlisted", f"{wid} {tool} {call_id}: not in side_effects")
                if was_undone:
                    verdict.flag(
                        "database disagrees with the record",
                        f"{wid} {tool} {call_id}: undone, yet the completed run keeps it",
                    )
                verdict.effects_kept += 1
                fate[tool] = "kept"
                continue
            status = run.compensations.get(call_id)
            if status == "completed":
                if not was_undone:
                    verdict.flag(
                        "database disagrees with the record",
                        f"{wid} {tool} {call_id}: its compensation completed, no undo applied",
                    )
                    fate[tool] = "listed"
                else:
                    verdict.effects_undone += 1
                    fate[tool] = "undone"
            elif status in ("failed", "not_undone"):
                verdict.effects_listed_not_undone += 1
                fate[tool] = "undone" if was_undone else "listed"
            else:
                verdict.flag(
                    "effect unlisted",
                    f"{wid} {tool} {call_id}: applied, in no compensation record ({run.status})",
                )
                fate[tool] = "undone" if was_undone else "listed"
        _check_rows(verdict, run, database, per_tool, fate)

    for name, found in (requests or {}).items():
        for what in found:
            verdict.flag("invalid provider request", f"{name}: {what}")
    return verdict


def _check_rows(
    verdict: Verdict,
    run: RunRecord,
    database: DatabaseState,
    per_tool: Counter[str],
    fate: dict[str, str],
) -> None:
    """The domain rows of one run against its recorded effects and their fate."""
    wid = run.workflow_id
    refunds = database.refunds.get(run.order_id, [])
    emails = database.emails.get(run.subject, 0)
    corrections = database.emails.get(f"Correction: {run.subject}", 0)
    for what, rows, recorded in (
        ("refunds", len(refunds), per_tool["issue_refund"]),
        ("emails", emails, per_tool["send_email"]),
    ):
        if rows > recorded:
            verdict.flag("effect applied twice", f"{wid}: {rows} {what}, {recorded} recorded")
        elif rows < recorded:
            verdict.flag(
                "database disagrees with the record", f"{wid}: {rows} {what}, {recorded} recorded"
            )
    if corrections > 1:
        verdict.flag("effect applied twice", f"{wid}: {corrections} corrections")
    expected_corrections = 1 if fate.get("send_email") == "undone" else 0
    if corrections != expected_corrections and corrections <= 1:
        verdict.flag(
            "database disagrees with the record",
            f"{wid}: {corrections} corrections, the email {fate.get('send_email', 'never sent')}",
        )
    reversed_ = sum(refunds)
    expected_reversed = 1 if fate.get("issue_refund") == "undone" else 0
    if refunds and reversed_ != expected_reversed:
        verdict.flag(
            "database disagrees with the record",
            f"{wid}: {reversed_} refunds reversed, the refund {fate.get('issue_refund')}",
        )
    status = database.order_status.get(run.order_id)
    cancelled = fate.get("cancel_order") in ("kept", "listed")
    if (status == "cancelled") != cancelled:
        verdict.flag(
            "database disagrees with the record",
            f"{wid}: order {run.order_id} is {status}, its cancellation "
            f"{fate.get('cancel_order', 'never applied')}",
        )


# --- one measurement ----------------------------------------------------------------------------


def prepare_database(path: Path, order_ids: list[int]) -> None:
    """Seed the demo database and make each run's order cancellable (processing, not shipped)."""
    with demo_tools.connect(path) as connection:
        marks = ",".join("?" * len(order_ids))
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            f"UPDATE orders SET status = 'processing', cancelled_at = NULL, cancel_reason = NULL"
            f" WHERE id IN ({marks})",
            order_ids,
        )
        connection.execute(f"DELETE FROM tracking WHERE order_id IN ({marks})", order_ids)
        connection.execute("COMMIT")


def _worker_env(scratch: Path, database: Path, fake: ConversationFake) -> dict[str, str]:
    return {
        **os.environ,
        "AGENT_DEMO_DB": str(database),
        "AGENT_MESSAGE_STORE": str(scratch / "messages.db"),
        "AGENT_RESULT_STORE": str(scratch / "results.db"),
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_BASE_URL": fake.base_url,
    }


async def measure(args: SimpleNamespace, scratch: Path) -> dict[str, Any]:
    from durable_agent.serving.dev_server import embedded_dev_server

    plans = plan_runs(args.seed, args.runs, args.cancels, args.spacing, args.provider_fault_rate)
    database = scratch / "demo.db"
    order_ids = [plan.order_id for plan in plans]
    prepare_database(database, order_ids)
    started = time.monotonic()
    with ConversationFake(plans) as fake:
        env = _worker_env(scratch, database, fake)
        async with embedded_dev_server() as temporal:
            client = temporal.client
            address = client.service_client.config.target_host
            workers = Workers(scratch, address, env, args.seed, args.kills, args.cached_share)
            driven = [Driven(plan) for plan in plans]
            done, ready = asyncio.Event(), asyncio.Event()

            def in_flight() -> bool:
                return any(d.handle is not None and not d.done for d in driven)

            killing = asyncio.create_task(workers.run(in_flight, done, ready))
            try:
                await asyncio.gather(*(drive(client, d, ready) for d in driven))
                done.set()
                await killing
                runs_seconds = time.monotonic() - started
                records = [await record_of(client, d) for d in driven]
                for record, d in zip(records, driven, strict=True):
                    if d.handle is not None and record.status in ENDINGS:
                        transcript = await d.handle.query(AgentWorkflow.transcript)
                        record.transcript_complete = _complete(transcript)
                verdict = check(records, read_database(database, order_ids), check_requests(fake))
                flagged = _flagged_runs(verdict.violations)
                # The runs that broke an invariant, and the slowest: a stall shows in its times.
                slowest = max(driven, key=lambda d: d.seconds).plan.workflow_id
                excerpts = {}
                for d in driven:
                    if d.plan.workflow_id in {*flagged, slowest} and d.handle is not None:
                        excerpts[d.plan.workflow_id] = await history_excerpt(d.handle)
                retries = await _retries(driven)
            finally:
                done.set()
                killing.cancel()
                with contextlib.suppress(BaseException):
                    await killing
                workers.stop()
        requests = len(fake.requests)
        faults = fake.faults_injected
        cut_off = fake.cut_off
    statuses = Counter(record.status for record in records)
    return {
        "seed": args.seed,
        "runs": len(records),
        "completed": statuses["COMPLETED"],
        "failed": statuses["FAILED"],
        "cancelled": statuses["CANCELED"],
        "other_endings": len(records) - sum(statuses[s] for s in ENDINGS),
        "failure_types": dict(Counter(r.error_type for r in records if r.status == "FAILED")),
        "outcomes_by_plan": {
            f"{intent} -> {status}": n
            for (intent, status), n in sorted(
                Counter((r.intent, r.status) for r in records).items()
            )
        },
        "kills": len(workers.kills),
        "kills_outside": sum(k.kind == "outside" for k in workers.kills),
        "kills_at_a_point": sum(k.kind == "point" for k in workers.kills),
        "kill_log": [asdict(kill) for kill in workers.kills],
        "workers_started": workers.started,
        "workers_cached": workers.cached_started,
        "kills_of_cached_workers": sum(k.cached for k in workers.kills),
        "run_seconds_p50": _percentile([r.seconds for r in records], 0.5),
        "run_seconds_p95": _percentile([r.seconds for r in records], 0.95),
        "slowest_run": max(((r.seconds, r.workflow_id) for r in records), default=(0.0, "-")),
        "runs_outlived_wait": sum(r.outlived_wait for r in records),
        "cancels_planned": sum(p.cancel_after is not None for p in plans),
        "cancels_sent": sum(1 for d in driven if d.cancel and d.cancel.startswith("sent")),
        "cancels_after_the_end": sum(
            1 for d in driven if d.cancel and not d.cancel.startswith("sent")
        ),
        "provider_requests": requests,
        "provider_faults": faults,
        "provider_requests_cut_off": cut_off,
        "activity_attempts_retried": retries.activity_attempts,
        "workflow_tasks_timed_out": retries.task_timeouts,
        "workflow_task_attempts_unrecorded": retries.task_attempts_unrecorded,
        "workflow_task_highest_attempt": retries.highest_task_attempt,
        "effects_applied": verdict.effects_applied,
        "effects_kept": verdict.effects_kept,
        "effects_undone": verdict.effects_undone,
        "effects_listed_not_undone": verdict.effects_listed_not_undone,
        "undone_with_outcome_unknown": sum(r.outcome_unknown for r in records),
        "violations": {name: len(found) for name, found in verdict.violations.items()},
        "violation_details": {k: v for k, v in verdict.violations.items() if v},
        "history_excerpts": excerpts,
        "runs_detail": [asdict(record) for record in records],
        "seconds": round(runs_seconds, 1),
    }


def _flagged_runs(violations: dict[str, list[str]]) -> set[str]:
    """The workflow ids the violations name (each starts with its run's id)."""
    return {
        what.split(" ", 1)[0].rstrip(":")
        for found in violations.values()
        for what in found
        if what.startswith("faults-")
    }


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values) or [0.0]
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def _complete(transcript: list[Any]) -> bool:
    try:
        return Transcript(messages=transcript).is_complete()
    except ValueError:  # TranscriptError, or pydantic's ValidationError wrapping it
        return False


@dataclass
class Retries:
    """Over all runs: what was tried again, from the histories."""

    activity_attempts: int = 0
    """Activity attempts after the first."""
    task_timeouts: int = 0
    """Workflow tasks that timed out, as the history records them."""
    task_attempts_unrecorded: int = 0
    """Attempts of a retried workflow task that the history holds no event for: the ones between
    its first timeout and the attempt that completed."""
    highest_task_attempt: tuple[int, str] = (1, "-")
    """The most attempts one workflow task needed, and its run."""


async def _retries(driven: list[Driven]) -> Retries:
    retries = Retries()
    for d in driven:
        if d.handle is None:
            continue
        history = await d.handle.fetch_history()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                attempt = event.activity_task_started_event_attributes.attempt
                retries.activity_attempts += attempt > 1
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                retries.task_timeouts += 1
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                attempt = event.workflow_task_scheduled_event_attributes.attempt
                retries.task_attempts_unrecorded += max(0, attempt - 2)
                retries.highest_task_attempt = max(
                    retries.highest_task_attempt, (attempt, d.plan.workflow_id)
                )
    return retries


def report(f: dict[str, Any]) -> str:
    rows = [
        ("runs", f["runs"]),
        ("completed / failed / cancelled", f"{f['completed']} / {f['failed']} / {f['cancelled']}"),
        ("ended otherwise", f["other_endings"]),
        (
            "kills injected (outside / at a point)",
            f"{f['kills']} ({f['kills_outside']} / {f['kills_at_a_point']})",
        ),
        (
            "cancels injected (sent / after the end)",
            f"{f['cancels_sent'] + f['cancels_after_the_end']} "
            f"({f['cancels_sent']} / {f['cancels_after_the_end']})",
        ),
        (
            "workers started (with a cache); kills of cached ones",
            f"{f['workers_started']} ({f['workers_cached']}); {f['kills_of_cached_workers']}",
        ),
        (
            "run time p50 / p95 / slowest",
            f"{f['run_seconds_p50']} / {f['run_seconds_p95']} / {f['slowest_run'][0]} s "
            f"({f['slowest_run'][1]})",
        ),
        (f"runs not ended after {RUN_TIMEOUT_SECONDS:g} s", f["runs_outlived_wait"]),
        (
            "provider requests (faults injected); cut off by a kill",
            f"{f['provider_requests']} ({f['provider_faults']}); {f['provider_requests_cut_off']}",
        ),
        ("activity attempts retried", f["activity_attempts_retried"]),
        ("workflow tasks timed out", f["workflow_tasks_timed_out"]),
        (
            "workflow task attempts not in any history; most attempts",
            f"{f['workflow_task_attempts_unrecorded']}; "
            f"{f['workflow_task_highest_attempt'][0]} ({f['workflow_task_highest_attempt'][1]})",
        ),
        ("effects applied", f["effects_applied"]),
        ("effects kept by completed runs", f["effects_kept"]),
        ("effects undone", f["effects_undone"]),
        ("effects listed as not undone", f["effects_listed_not_undone"]),
        ("compensations of an outcome unknown", f["undone_with_outcome_unknown"]),
        *((f"violations: {name}", count) for name, count in f["violations"].items()),
        ("time", f"{f['seconds']} s"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [
        f"seed {f['seed']}; failures: {f['failure_types'] or 'none'}",
        "plan -> outcome: " + ", ".join(f"{k} {n}" for k, n in f["outcomes_by_plan"].items()),
    ]
    lines += [f"{name:<{width}}  {value}" for name, value in rows]
    for name, found in f["violation_details"].items():
        lines.append(f"VIOLATED: {name}")
        lines += [f"  {what}" for what in found]
    flagged = _flagged_runs(f["violation_details"])
    for workflow_id, excerpt in f["history_excerpts"].items():
        slowest = " (the slowest run)" if workflow_id == f["slowest_run"][1] else ""
        if workflow_id not in flagged and f["slowest_run"][0] < STALL_SECONDS:
            continue  # the slowest run's history is in --json; printed only for a stall
        lines.append(f"history of {workflow_id}{slowest} (last {len(excerpt)} events):")
        lines += [f"  {line}" for line in excerpt]
    return "\n".join(lines)


# --- one workflow task lost again and again ----------------------------------------------------


async def measure_lost_attempts(args: SimpleNamespace, scratch: Path) -> dict[str, Any]:
    """One run whose first workflow task is lost `--lost-task-attempts` times in a row: each
    worker kills itself in the run's `resolve_tools` local activity, as a killed worker (or a
    worker without a cache that drops the task, see docs/testing.md) loses it. Records when the
    server hands out each attempt, from `describe()`: the gap between two is the timeout of the
    lost one, which the server stretches from the fourth attempt on."""
    from durable_agent.serving.dev_server import embedded_dev_server

    [plan] = plan_runs(args.seed, 1, 0, args.spacing, 0.0)
    database = scratch / "demo.db"
    prepare_database(database, [plan.order_id])
    crash_at = f"before:{tool_catalog.RESOLVE_TOOLS}:1"
    attempts: list[dict[str, Any]] = []
    with ConversationFake([plan]) as fake:
        async with embedded_dev_server() as temporal:
            client = temporal.client
            address = client.service_client.config.target_host
            workers = Workers(scratch, address, _worker_env(scratch, database, fake), 0, 0, 0.0)
            try:
                process = await workers.start(crash_at)
                clock = time.monotonic()
                handle = await client.start_workflow(
                    AgentWorkflow.run,
                    plan.agent_input(),
                    id=plan.workflow_id,
                    task_queue=TASK_QUEUE,
                    task_timeout=TASK_TIMEOUT,
                )
                watching = asyncio.create_task(_watch_task_attempts(handle, clock, attempts))
                for lost in range(args.lost_task_attempts):
                    while process.poll() is None:
                        await asyncio.sleep(0.05)
                    last = lost == args.lost_task_attempts - 1
                    process = await workers.start(None if last else crash_at)
                    attempts[-1]["next_worker_polling"] = round(time.monotonic() - clock, 1)
                with contextlib.suppress(WorkflowFailureError):
                    await asyncio.wait_for(handle.result(), 15 * 60)  # 10 lost: about 11 min
                watching.cancel()
                excerpt = await history_excerpt(handle, limit=1000)
            finally:
                workers.stop()
    moved_on = next((line for line in excerpt if "call_model" in line), "")
    return {
        "seed": args.seed,
        "lost_task_attempts": args.lost_task_attempts,
        "task_timeout_seconds": TASK_TIMEOUT.total_seconds(),
        "attempts": attempts,
        "first_model_call": moved_on,
        "history": excerpt[:20],
    }


async def _watch_task_attempts(
    handle: WorkflowHandle[Any, Any], clock: float, attempts: list[dict[str, Any]]
) -> None:
    """Appends {attempt, handed_out} each time a new attempt of the task is started."""
    seen = 0
    while True:
        pending = (await handle.describe()).raw_description.pending_workflow_task
        started = pending.state == PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
        if started and pending.attempt > seen:
            seen = pending.attempt
            attempts.append({"attempt": seen, "handed_out": round(time.monotonic() - clock, 1)})
        await asyncio.sleep(0.1)


def report_lost_attempts(f: dict[str, Any]) -> str:
    lines = [
        f"one run, its first workflow task lost {f['lost_task_attempts']} times "
        f"(task timeout {f['task_timeout_seconds']:g} s)"
    ]
    previous = None
    for entry in f["attempts"]:
        gap = "" if previous is None else f", {entry['handed_out'] - previous:.1f} s after the last"
        polling = entry.get("next_worker_polling")
        then = f"; the next worker polled at +{polling} s" if polling is not None else ""
        lines.append(
            f"  attempt {entry['attempt']} handed out at +{entry['handed_out']} s{gap}{then}"
        )
        previous = entry["handed_out"]
    lines.append(f"the run moved on: {f['first_model_call']}")
    return "\n".join(lines)


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option(
    "--runs",
    type=click.IntRange(1, demo_tools.BULK_ORDER_COUNT),
    default=100,
    help="one order each, of the demo's bulk orders",
)
@click.option("--kills", type=int, default=35)
@click.option("--cancels", type=int, default=25)
@click.option("--seed", type=int, help="default: drawn, and printed")
@click.option("--spacing", type=float, default=1.5, help="seconds between run starts")
@click.option("--provider-fault-rate", type=float, default=0.05)
@click.option(
    "--cached-share", type=float, default=0.5, help="share of workers with a workflow cache"
)
@click.option("--json", type=Path, help="also write the figures to this file")
@click.option("--keep", type=Path, help="keep the databases and worker logs here")
@click.option(
    "--lost-task-attempts",
    type=click.IntRange(1, 10),
    metavar="N",
    help="instead: one run whose first workflow task is lost N times in a row, and when the "
    "server retries it (the 10th waits about 11 min)",
)
def command_line(**options: Any) -> SimpleNamespace:
    args = SimpleNamespace(**options)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1_000_000)
    return args


@contextlib.contextmanager
def scratch_directory(keep: Path | None) -> Iterator[Path]:
    if keep is None:
        with tempfile.TemporaryDirectory() as scratch:
            yield Path(scratch)
        return
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    yield keep


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    print(f"bench.faults: seed {args.seed} (re-run with --seed {args.seed})", flush=True)
    # A killed worker's attempts come back as timeouts: the harness expects them by the dozen.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    if args.lost_task_attempts is not None:
        with scratch_directory(args.keep) as scratch:
            figures = await measure_lost_attempts(args, scratch)
        print(report_lost_attempts(figures))
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
        return 0
    with scratch_directory(args.keep) as scratch:
        figures = await measure(args, scratch)
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    broken = sum(figures["violations"].values())
    return 1 if broken else 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
