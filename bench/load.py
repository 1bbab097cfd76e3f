"""Load: many concurrent runs on one worker while the model keeps failing transiently.

    python -m bench.load [--runs 500] [--failure-rate 0.1] [--json PATH]

One embedded dev server, one in-process worker, `--runs` AgentWorkflow runs started at once.
Each run reads an order, refunds 1.00 on it and emails the customer (side-effecting demo tools,
on a fresh SQLite demo database), then answers. The model is the scripted provider; an activity
interceptor on the worker fails `--failure-rate` of all model calls with a retryable
ProviderTransientError before they reach it, and makes the same share of the side-effecting
calls lose their first attempt's reply *after* the effect committed (the worst moment: the retry
must find the effect applied, not apply it again).

A run whose model fails more times in a row than its retry policy allows (three attempts) fails;
it must fail cleanly: with a named AgentError, its effects undone by their compensations.
Checked at the end, and printed:

- runs completed, and runs failed cleanly (every other outcome is counted as unclean);
- invalid transcripts: a run's final transcript (queried) or any request the model received
  that breaks the pairing rule or leaves a call without its result; must be 0;
- duplicate effects: a refund, an email or a compensation applied more than once for one run,
  counted from the demo database's own rows; must be 0;
- total time, p50/p95 run latency, and the peak RSS of this process (the worker, the client
  and the bench; the dev server runs apart).

The exit status is 1 when an invariant is broken.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import resource
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio import activity
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from durable_agent.activities.providers.scripted import recorded_requests, requests_recorded
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.errors import AgentError
from durable_agent.workflows.inputs import AgentInput, AgentResult, ToolApprovalPolicy
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.state import FailureDetails
from durable_agent.workflows.transcript import Message, Transcript

TASK_QUEUE = "bench-load"
FIRST_ORDER = demo_tools.BULK_FIRST_ID
"""Run i refunds order FIRST_ORDER + i: each run has its own order, so its effects can be told
apart in the database."""
EFFECT_TOOLS = frozenset({"issue_refund", "send_email"})
AGENT_ERRORS = frozenset(cls.__name__ for cls in AgentError.__subclasses__())


class FaultInjector(Interceptor):
    """Fails a share of model calls before they run, and makes a share of side-effecting calls
    lose their first reply after the effect committed. Decided per attempt by a seeded roll, so
    a run of the bench is repeatable."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.seed = seed
        self.model_calls = 0
        self.model_faults = 0
        self.effect_calls = 0
        self.effect_faults = 0

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _InjectFaults(next, self)

    def roll(self) -> float:
        info = activity.info()
        key = f"{self.seed}/{info.workflow_id}/{info.activity_id}/{info.attempt}"
        return random.Random(key).random()


class _InjectFaults(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, injector: FaultInjector) -> None:
        super().__init__(next)
        self.injector = injector

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        injector = self.injector
        if info.activity_type == "call_model":
            injector.model_calls += 1
            if injector.roll() < injector.rate:
                injector.model_faults += 1
                raise ApplicationError(
                    "injected: the provider is overloaded (HTTP 529)",
                    type="ProviderTransientError",
                )
        result = await self.next.execute_activity(input)
        if info.activity_type in EFFECT_TOOLS:
            injector.effect_calls += 1
            if info.attempt == 1 and injector.roll() < injector.rate:
                injector.effect_faults += 1
                raise ApplicationError(
                    "injected: the reply was lost after the effect committed",
                    type="ConnectionLost",
                )
        return result


def subject(index: int) -> str:
    return f"Refund on order {FIRST_ORDER + index} (load run {index})"


def run_input(index: int) -> AgentInput:
    order_id = FIRST_ORDER + index

    def turn(name: str, **arguments: Any) -> ScriptedTurn:
        return ScriptedTurn(calls=[ScriptedCall(name=name, arguments=arguments)])

    script = [
        turn("get_order", order_id=order_id),
        turn("issue_refund", order_id=order_id, amount=1.0),
        turn(
            "send_email",
            to="bulk@b.com",
            subject=subject(index),
            body=f"We refunded 1.00 USD on order {order_id}.",
        ),
        ScriptedTurn(text=f"Refunded 1.00 on order {order_id}; the customer has been told."),
    ]
    return AgentInput(
        prompt=f"Refund 1.00 on order {order_id} and tell the customer.",
        label="load",
        tools=["get_order", "issue_refund", "send_email"],
        model=ModelSettings(
            script=script,
            retry=RetrySettings(maximum_attempts=3, initial_interval_seconds=0.1),
        ),
        tool_approval=ToolApprovalPolicy(approve_all=True),  # an unattended batch job
    )


@dataclass
class RunOutcome:
    index: int
    workflow_id: str
    seconds: float
    result: AgentResult | None = None
    error: ApplicationError | None = None
    transcript: list[Message] = field(default_factory=list)

    @property
    def clean_failure(self) -> bool:
        """Failed with a named error, every effect it applied undone."""
        if self.error is None or self.error.type not in AGENT_ERRORS:
            return False
        compensations = FailureDetails.of_error(self.error).compensations
        return all(c.status == "completed" for c in compensations)


async def one_run(client: Client, index: int, prefix: str) -> RunOutcome:
    workflow_id = f"{prefix}-{index:04d}"
    started = time.monotonic()
    handle = await client.start_workflow(
        AgentWorkflow.run, run_input(index), id=workflow_id, task_queue=TASK_QUEUE
    )
    outcome = RunOutcome(index, workflow_id, 0.0)
    try:
        outcome.result = await handle.result()
    except WorkflowFailureError as failure:
        cause = failure.cause
        outcome.error = (
            cause if isinstance(cause, ApplicationError) else ApplicationError(str(cause))
        )
    outcome.seconds = time.monotonic() - started
    return outcome


def valid(messages: list[Message]) -> bool:
    try:
        return Transcript(messages=messages).is_complete()
    except ValueError:  # TranscriptError, or pydantic's ValidationError wrapping it
        return False


def duplicate_effects(database: Path, outcomes: list[RunOutcome]) -> int:
    """Effects applied more than once for one run, from the demo database's own rows: refunds
    on the run's order, emails with the run's subject, corrections of that email."""
    duplicates = 0
    connection = sqlite3.connect(database)
    try:
        for outcome in outcomes:
            order_id = FIRST_ORDER + outcome.index
            refunds = connection.execute(
                "SELECT COUNT(*) FROM refunds WHERE order_id = ?", (order_id,)
            ).fetchone()[0]
            emails = connection.execute(
                "SELECT COUNT(*) FROM outbox WHERE subject = ?", (subject(outcome.index),)
            ).fetchone()[0]
            corrections = connection.execute(
                "SELECT COUNT(*) FROM outbox WHERE subject = ?",
                (f"Correction: {subject(outcome.index)}",),
            ).fetchone()[0]
            duplicates += sum(max(count - 1, 0) for count in (refunds, emails, corrections))
    finally:
        connection.close()
    return duplicates


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


async def measure(runs: int, failure_rate: float, seed: int) -> dict[str, Any]:
    injector = FaultInjector(failure_rate, seed)
    prefix = f"load-{seed}"  # the rolls depend on the ids: the same seed, the same faults
    with requests_recorded():
        async with (
            embedded_dev_server() as env,
            build_worker(env.client, TASK_QUEUE, interceptors=[injector]),
        ):
            started = time.monotonic()
            outcomes = await asyncio.gather(*(one_run(env.client, i, prefix) for i in range(runs)))
            seconds = time.monotonic() - started
            # Queries of closed runs replay them on the worker: a few at a time.
            gate = asyncio.Semaphore(20)

            async def read_transcript(outcome: RunOutcome) -> None:
                async with gate:
                    handle = env.client.get_workflow_handle(outcome.workflow_id)
                    outcome.transcript = await handle.query(AgentWorkflow.transcript)

            await asyncio.gather(*(read_transcript(outcome) for outcome in outcomes))

        requests = [r for o in outcomes for r in recorded_requests(o.workflow_id)]
    invalid = sum(not valid(o.transcript) for o in outcomes)
    invalid += sum(not valid(request.messages) for request in requests)
    completed = [o for o in outcomes if o.result is not None]
    failed_cleanly = [o for o in outcomes if o.result is None and o.clean_failure]
    applied = demo_tools.applied_calls()
    latencies = [o.seconds for o in outcomes]
    return {
        "runs": runs,
        "failure_rate": failure_rate,
        "completed": len(completed),
        "failed_cleanly": len(failed_cleanly),
        "failed_uncleanly": runs - len(completed) - len(failed_cleanly),
        "failures": sorted(
            {f"{o.error.type}: {o.error.message[:120]}" for o in outcomes if o.error}
        ),
        "invalid_transcripts": invalid,
        "requests_checked": len(requests),
        "duplicate_effects": duplicate_effects(demo_tools.demo_db_path(), outcomes),
        "effects_applied": sum(1 for call in applied if call["tool"] in EFFECT_TOOLS),
        "compensations_applied": sum(1 for call in applied if call["tool"].startswith("undo ")),
        "model_calls": injector.model_calls,
        "model_faults": injector.model_faults,
        "effect_calls": injector.effect_calls,
        "effect_replies_lost": injector.effect_faults,
        "seconds": round(seconds, 1),
        "p50_seconds": round(statistics.median(latencies), 2),
        "p95_seconds": round(percentile(latencies, 0.95), 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def report(figures: dict[str, Any]) -> str:
    f = figures
    return "\n".join(
        [
            f"runs: {f['runs']} concurrent on one worker, "
            f"{f['failure_rate']:.0%} of model calls failing transiently",
            f"completed: {f['completed']}; failed cleanly: {f['failed_cleanly']}; "
            f"failed otherwise: {f['failed_uncleanly']}",
            *(f"  {line}" for line in f["failures"]),
            f"model calls: {f['model_calls']}, of which failed (injected): {f['model_faults']}",
            f"side effects applied: {f['effects_applied']} (replies lost after the commit: "
            f"{f['effect_replies_lost']}); compensations applied: {f['compensations_applied']}",
            f"invalid transcripts: {f['invalid_transcripts']} "
            f"(final transcripts and {f['requests_checked']} model requests checked)",
            f"duplicate effects: {f['duplicate_effects']}",
            f"total time: {f['seconds']} s; run latency p50 {f['p50_seconds']} s, "
            f"p95 {f['p95_seconds']} s",
            f"peak RSS of the worker process: {f['peak_rss_mb']} MB",
        ]
    )


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option(
    "--runs",
    type=click.IntRange(1, demo_tools.BULK_ORDER_COUNT),
    default=500,
    help="one order each, of the demo's bulk orders",
)
@click.option("--failure-rate", type=float, default=0.1)
@click.option("--seed", type=int, default=1)
@click.option("--json", type=Path, help="also write the figures to this file")
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    # Every injected fault would log a warning and a traceback: thousands of lines.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as scratch:
        for variable, name in (
            ("AGENT_DEMO_DB", "demo.db"),
            ("AGENT_MESSAGE_STORE", "messages.db"),
            ("AGENT_RESULT_STORE", "results.db"),
        ):
            os.environ[variable] = str(Path(scratch) / name)
        figures = await measure(args.runs, args.failure_rate, args.seed)
    print(report(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    broken = (
        figures["failed_uncleanly"]
        or figures["invalid_transcripts"]
        or figures["duplicate_effects"]
    )
    return 1 if broken else 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
