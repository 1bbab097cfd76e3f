"""Admission control: many concurrent runs against a provider that serves N requests at once.

    python -m bench.admission [--runs 100] [--limit 5] [--latency 0.05] [--quick] [--json PATH]

One embedded dev server; for each setup a fresh task queue, a fresh fake OpenAI
(tests/fake_openai.py) in this process that serves `--limit` requests at once, each in
`--latency` seconds, and answers one more with OpenAI's 429 and `retry-after: 1`
(`retry-after-ms: 1000`), and fresh worker processes (`python -m bench.admission --serve`, which
builds the worker as worker.py does, with the setup's limits), as a fleet runs them.
`--runs` runs are started at once. Each run asks the model, reads an order with the demo's
`get_order` tool, and asks again for its answer: two model calls a run, the second one only
after the first and the tool. The model's retry policy is the default (5 attempts).

The setups, each the worker configuration it names:

- **before**: no admission control. Every call starts as soon as the worker has an activity slot
  (the SDK's 100), and a `retry-after` delays only the call that got it, as before issue 17.
- **hold only**: no limits configured; a `retry-after` holds every later call of the provider
  on the worker (the default now).
- **concurrency N** (`AGENT_MODEL_CONCURRENCY_OPENAI=N`): at most N calls at once.
- **2 workers x N/2**: two workers polling the same queues, each with half the limit: a fleet.
- **concurrency 2N**: a limit set above what the provider serves.
- **rate R/s** (`AGENT_MODEL_RATE_OPENAI=R`, with a provider that has no limit): the calls
  started a second by the server-enforced rate, counted at the fake in each one-second window.

For each: the 429s the fake answered, those of the first wave (before the first `retry-after`
could have passed) and those after it, the runs that failed, the peak of requests in flight at
the fake, and the total time against the N-limited ideal: ceil(calls / N) x latency (for the
rate row: calls / R).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowFailureError

from durable_agent.activities.admission import Admission, ProviderLimits
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker, connect
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, ToolApprovalPolicy
from durable_agent.workflows.model_gateway import model_task_queue
from durable_agent.workflows.model_settings import ModelSettings
from tests.fake_openai import RATE_LIMIT_HEADERS, FakeOpenAI, Recorded, Reply

ROOT = Path(__file__).resolve().parent.parent
RETRY_AFTER_SECONDS = float(RATE_LIMIT_HEADERS["retry-after-ms"]) / 1000
ORDER = 1042


def answer(body: dict[str, Any]) -> Reply:
    """The provider's side of a run: a look-up first, then the answer once the result is in."""
    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return Reply(f"Order {ORDER} is on its way.")
    call_id = f"call_{uuid.uuid4().hex[:8]}"
    return Reply(tool_calls=[(call_id, "get_order", json.dumps({"order_id": ORDER}))])


def run_input(index: int) -> AgentInput:
    return AgentInput(
        prompt=f"Where is order {ORDER}? (run {index})",
        tools=["get_order"],
        model=ModelSettings(provider="openai", model="gpt-fake"),
        tool_approval=ToolApprovalPolicy(approve_all=True),
    )


@dataclass(frozen=True)
class Setup:
    name: str
    workers: list[ProviderLimits]
    """The openai limits of each worker process (one entry a worker)."""
    provider_limit: int | None
    """What the fake serves at once (None: no limit)."""
    setting: str
    """The configuration, as a user writes it."""
    rate: float | None = None
    """The server-enforced rate, when it is what bounds the time (else the provider's limit)."""

    def ideal_seconds(self, calls: int, limit: int, latency: float) -> float:
        if self.rate is not None:
            return calls / self.rate
        return math.ceil(calls / limit) * latency


def setups(limit: int, rate: float) -> list[Setup]:
    half = max(limit // 2, 1)
    return [
        Setup("before", [ProviderLimits(hold_on_retry_after=False)], limit, "(issue 17's before)"),
        Setup("hold only", [ProviderLimits()], limit, "nothing set"),
        Setup(
            f"concurrency {limit}",
            [ProviderLimits(concurrency=limit)],
            limit,
            f"AGENT_MODEL_CONCURRENCY_OPENAI={limit}",
        ),
        Setup(
            f"2 workers x {half}",
            [ProviderLimits(concurrency=half)] * 2,
            limit,
            f"AGENT_MODEL_CONCURRENCY_OPENAI={half} on each of 2 workers",
        ),
        Setup(
            f"concurrency {2 * limit}",
            [ProviderLimits(concurrency=2 * limit)],
            limit,
            f"AGENT_MODEL_CONCURRENCY_OPENAI={2 * limit}",
        ),
        Setup(
            f"rate {rate:g}/s",
            [ProviderLimits(rate_per_second=rate)],
            None,
            f"AGENT_MODEL_RATE_OPENAI={rate:g}",
            rate=rate,
        ),
    ]


async def measure(
    client: Client, address: str, setup: Setup, runs: int, limit: int, latency: float
) -> dict[str, Any]:
    task_queue = f"bench-admission-{uuid.uuid4().hex[:8]}"
    fake = FakeOpenAI(responder=answer, max_in_flight=setup.provider_limit, latency_seconds=latency)
    failed: list[str] = []
    with fake:
        env = {**os.environ, "OPENAI_API_KEY": fake.api_key, "OPENAI_BASE_URL": fake.base_url}
        workers = [serve(address, task_queue, limits, env) for limits in setup.workers]
        try:
            await polled_by(client, task_queue, len(workers))
            started = time.monotonic()

            async def one(index: int) -> None:
                handle = await client.start_workflow(
                    AgentWorkflow.run,
                    run_input(index),
                    id=f"{task_queue}-{index:03d}",
                    task_queue=task_queue,
                )
                try:
                    await handle.result()
                except WorkflowFailureError as failure:
                    failed.append(str(failure.cause))

            await asyncio.gather(*(one(i) for i in range(runs)))
            seconds = time.monotonic() - started
        finally:
            for worker in workers:
                stop(worker)
    requests = fake.requests
    served = [r for r in requests if not r.refused]
    refused = [r for r in requests if r.refused]
    first_wave_ends = refused[0].at + RETRY_AFTER_SECONDS if refused else math.inf
    ideal = setup.ideal_seconds(2 * runs, limit, latency)
    return {
        "setup": setup.name,
        "setting": setup.setting,
        "runs": runs,
        "failed_runs": len(failed),
        "failures": sorted({f[:160] for f in failed}),
        "requests": len(requests),
        "served": len(served),
        "refused_429": len(refused),
        "refused_429_first_wave": sum(r.at < first_wave_ends for r in refused),
        "refused_429_after_first_wave": sum(r.at >= first_wave_ends for r in refused),
        "peak_in_flight": fake.peak_in_flight,
        "busiest_second": busiest_second(served),
        "served_per_second": round(len(served) / (served[-1].at - served[0].at), 1)
        if len(served) > 1
        else None,
        "seconds": round(seconds, 2),
        "ideal_seconds": round(ideal, 2),
        "x_ideal": round(seconds / ideal, 2),
    }


# --- the worker processes -----------------------------------------------------------------------


def serve(
    address: str, task_queue: str, limits: ProviderLimits, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """A worker process for `task_queue` with these openai limits."""
    command = [sys.executable, "-m", "bench.admission", "--serve", address, task_queue]
    command += ["--limits", json.dumps(dataclasses.asdict(limits))]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)


def stop(worker: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a person stops a worker: it shuts down gracefully; killed if it does not."""
    worker.send_signal(signal.SIGINT)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


async def polled_by(client: Client, task_queue: str, workers: int) -> None:
    """Until `workers` processes poll the run queue and the openai queue."""
    queues = [
        (task_queue, TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        (model_task_queue(task_queue, "openai"), TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ]
    deadline = time.monotonic() + 60
    while True:
        counts = []
        for name, kind in queues:
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=name),
                    task_queue_type=kind,
                )
            )
            counts.append(len({poller.identity for poller in described.pollers}))
        if min(counts) >= workers:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker processes did not poll {task_queue} within 60 s")
        await asyncio.sleep(0.1)


async def serve_until_interrupted(address: str, task_queue: str, limits: ProviderLimits) -> None:
    client = await connect(address)
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stopping.set)
    async with build_worker(client, task_queue, admission_limits=Admission({"openai": limits})):
        await stopping.wait()


def busiest_second(requests: list[Recorded]) -> int:
    """The most requests that arrived within one second of each other."""
    times = sorted(r.at for r in requests)
    most = start = 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def table(rows: list[dict[str, Any]], limit: int, latency: float) -> str:
    lines = [
        f"provider: {limit} requests at once, {latency * 1000:.0f} ms each; 429 with "
        f"retry-after {RETRY_AFTER_SECONDS:g} s above that",
        "| setup | setting | 429s (first wave / after) | failed runs | peak in flight "
        "| busiest second (overall a second) | total time |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['setup']} | {row['setting']} | {row['refused_429']} "
            f"({row['refused_429_first_wave']} / {row['refused_429_after_first_wave']}) "
            f"| {row['failed_runs']} of {row['runs']} | {row['peak_in_flight']} "
            f"| {row['busiest_second']} ({row['served_per_second']}) "
            f"| {row['seconds']:.2f} s = {row['x_ideal']:.2f}x "
            f"the ideal {row['ideal_seconds']:.2f} s |"
        )
    return "\n".join(lines)


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--runs", type=int, default=100)
@click.option("--limit", type=int, default=5, help="requests the provider serves at once")
@click.option("--latency", type=float, default=0.2, help="seconds a request takes")
@click.option("--rate", type=float, default=20.0, help="calls a second, for the rate row")
@click.option("--quick", is_flag=True, help="20 runs, and no rate row")
@click.option("--only", multiple=True, help="run only the setups named so")
@click.option("--json", type=Path, help="also write the figures to this file")
@click.option("--serve", nargs=2, metavar="ADDRESS QUEUE", hidden=True)
@click.option("--limits", hidden=True)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    if args.serve:
        # Each 429 logs a warning with its traceback: hundreds of lines in the "before" setups.
        logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
        limits = ProviderLimits(**json.loads(args.limits or "{}"))
        address, task_queue = args.serve
        await serve_until_interrupted(address, task_queue, limits)
        return 0
    runs = 20 if args.quick else args.runs
    chosen: list[Setup] = setups(args.limit, args.rate)
    if args.quick:
        chosen = [s for s in chosen if not s.name.startswith("rate")]
    if args.only:
        chosen = [s for s in chosen if any(s.name.startswith(o) for o in args.only)]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for variable, name in (
            ("AGENT_DEMO_DB", "demo.db"),
            ("AGENT_MESSAGE_STORE", "messages.db"),
            ("AGENT_RESULT_STORE", "results.db"),
        ):
            os.environ[variable] = str(Path(scratch) / name)
        async with embedded_dev_server() as env:
            address = env.client.service_client.config.target_host
            for setup in chosen:
                row = await measure(env.client, address, setup, runs, args.limit, args.latency)
                print(f"{setup.name}: {json.dumps(row)}", file=sys.stderr, flush=True)
                rows.append(row)
    print(table(rows, args.limit, args.latency))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
