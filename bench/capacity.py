"""Capacity: the arrival rate one host sustains before model calls queue.

    python -m bench.capacity [--processes 1,2] [--steps 10] [--delay 0.2] [--start-rate 2]
                             [--rate-factor 1.5] [--level-seconds 30] [--max-levels 10]
                             [--threshold 1.0] [--sandbox stock|fast] [--json PATH] [--quick]

A persistent dev server (SQLite on disk, as `temporal server start-dev --db-filename` keeps it),
and for each count of `--processes`, that many worker processes started as a deployment starts
them (`worker.py --tools bench.workload`, bench/scaling.py). Runs of the suite's workload
(bench/workload.py: `--steps` tool-calling steps and an answer, the scripted model taking
`--delay` s a call, in the activity) arrive open-loop: at a fixed rate, whether or not earlier
runs have finished. Each level lasts `--level-seconds`, then the rate is multiplied by
`--rate-factor`, until the level's model calls queue: the p95 of their schedule-to-start, or
of their wait, is over `--threshold` s. The last level under it is the sustainable rate.

A model call's schedule-to-start is its ActivityTaskStarted's time less its
ActivityTaskScheduled's; its wait runs from the scheduling of the workflow task that asked for
it, so it also holds that task's time in the queue and on the worker. Schedule-to-start alone
misses the queue a busy worker process forms: its activity slots stay free while its workflow
tasks wait (measured: 44 s of a run's 51 s in the workflow-task queue, schedule-to-start 0).
Both are read from the runs' histories after each level, for a sample of `--sample` runs spread
over the level, so that reading them does not load the server while it is measured. The
histories also give the events, bytes, workflow tasks, activities and Temporal Cloud actions of
a run, and where its time went.
Before the levels, one run of `--steps` and one of twice as many give what a step adds and what a
run costs besides (`probe`): the per-step figures bench/sizing.py models a fleet from.

`--sandbox` is passed to the worker processes as AGENT_SANDBOX and reported; the worker's own
default applies when it is not given. The figures go to `--json` (default
bench/results/capacity.json) and a summary to stdout.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from click.core import ParameterSource
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from bench import workload
from bench.floor_workflow import FloorInput, FloorWorkflow
from bench.scaling import children_of_self, cpu_of, start_worker_processes, stop_worker_processes
from bench.suite import load_average, machine
from durable_agent.serving.command_line import Command, exit_now, parse, refuse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.status import starting_search_attributes

REPO = Path(__file__).resolve().parent.parent
DEFAULT_JSON = REPO / "bench" / "results" / "capacity.json"
SANDBOX_VARIABLE = "AGENT_SANDBOX"
MODEL_ACTIVITIES = {"call_model", "floor_model"}
"""The model calls' activity types: the agent's, and the floor's (bench/floor_workflow.py)."""
EXEMPT_SEARCH_ATTRIBUTES = {"TemporalChangeVersion"}
LOCAL_ACTIVITY_MARKER = "core_local_activity"

E = EventType


def _seconds(event: HistoryEvent) -> float:
    return event.event_time.ToDatetime().timestamp()


# What counts as a Temporal Cloud action, from the history (docs.temporal.io/cloud/actions):
# a start (and a continue-as-new's new run), each activity scheduled and each retry of it, each
# timer, signal, accepted update and search-attribute upsert (but the SDK's own upserts of
# TemporalChangeVersion, which a `workflow.patched` makes, are exempt), a child start (two), and
# the local activities of one workflow task together as one (their markers; a patch's marker is
# not one). Queries and heartbeats leave no event; this workload makes neither.
ONE_ACTION_EACH = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
    E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    E.EVENT_TYPE_TIMER_STARTED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED,
    E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
}

# The events that open a persistence transaction on the history shard (a mutable-state update
# and a history append). The others are written in the same transaction as one of these: an
# activity's scheduling with the workflow task that asked for it, the next workflow task's
# scheduling with the completion that caused it, the run's completion with its last task.
TRANSACTION_EVENTS = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
    E.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    E.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
    E.EVENT_TYPE_ACTIVITY_TASK_STARTED,
    E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
    E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
    E.EVENT_TYPE_TIMER_FIRED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
}


@dataclass
class RunFigures:
    """One run, read from its history."""

    events: int = 0
    bytes: int = 0
    actions: int = 0
    workflow_tasks: int = 0
    activities: int = 0
    model_calls: int = 0
    transactions: int = 0
    model_schedule_to_start: list[float] = field(default_factory=list)
    model_waits: list[float] = field(default_factory=list)
    """From the workflow task that asked for each model call being scheduled to the call's start:
    its schedule-to-start and the workflow task ahead of it, queueing included."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Where the run's wall time went: model calls running, tools running, activities waiting
    for a worker, workflow tasks waiting for a worker and running on it, and the rest (the
    server between one event and the next)."""
    kinds: dict[str, int] = field(default_factory=dict)
    """Events by type (`ACTIVITY_TASK_SCHEDULED`, ...; an upsert's or a marker's also by what
    it is: `UPSERT_WORKFLOW_SEARCH_ATTRIBUTES (TemporalChangeVersion)`, `MARKER_RECORDED
    (core_patch)`): what a run's events are, to set one workload's beside another's."""


def read_history(events: Iterable[HistoryEvent]) -> RunFigures:
    events = list(events)
    figures = RunFigures(events=len(events), bytes=sum(e.ByteSize() for e in events))
    by_id = {e.event_id: e for e in events}
    spent = dict.fromkeys(
        ("model_running", "tools_running", "activity_queued", "task_queued", "task_running"), 0.0
    )
    marker_tasks: set[int] = set()
    for event in events:
        kind = event.event_type
        name = _kind_name(event)
        figures.kinds[name] = figures.kinds.get(name, 0) + 1
        figures.actions += kind in ONE_ACTION_EACH
        figures.transactions += kind in TRANSACTION_EVENTS
        if kind == E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            figures.actions += 2
        elif kind == E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            figures.actions += 1  # the new run's start
        elif kind == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            upserted = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            figures.actions += bool(set(upserted.indexed_fields) - EXEMPT_SEARCH_ATTRIBUTES)
        elif kind == E.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                marker_tasks.add(marker.workflow_task_completed_event_id)
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            figures.activities += 1
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            figures.model_calls += name in MODEL_ACTIVITIES
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            figures.actions += max(started.attempt - 1, 0)  # each retry is an action
            scheduled = by_id[started.scheduled_event_id]
            waited = _seconds(event) - _seconds(scheduled)
            spent["activity_queued"] += waited
            attributes = scheduled.activity_task_scheduled_event_attributes
            if attributes.activity_type.name in MODEL_ACTIVITIES:
                figures.model_schedule_to_start.append(waited)
                asked = by_id[attributes.workflow_task_completed_event_id]
                task = asked.workflow_task_completed_event_attributes.scheduled_event_id
                figures.model_waits.append(_seconds(event) - _seconds(by_id[task]))
        elif kind == E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = event.activity_task_completed_event_attributes
            scheduled = by_id[done.scheduled_event_id]
            running = _seconds(event) - _seconds(by_id[done.started_event_id])
            name = scheduled.activity_task_scheduled_event_attributes.activity_type.name
            spent["model_running" if name in MODEL_ACTIVITIES else "tools_running"] += running
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            scheduled_id = event.workflow_task_started_event_attributes.scheduled_event_id
            spent["task_queued"] += _seconds(event) - _seconds(by_id[scheduled_id])
        elif kind == E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            figures.workflow_tasks += 1
            started_id = event.workflow_task_completed_event_attributes.started_event_id
            spent["task_running"] += _seconds(event) - _seconds(by_id[started_id])
    figures.actions += len(marker_tasks)  # a workflow task's local activities: one action
    wall = _seconds(events[-1]) - _seconds(events[0]) if events else 0.0
    spent["server_and_other"] = max(wall - sum(spent.values()), 0.0)
    spent["wall"] = wall
    figures.seconds = spent
    return figures


def _kind_name(event: HistoryEvent) -> str:
    name = E.Name(event.event_type).removeprefix("EVENT_TYPE_")
    if event.HasField("marker_recorded_event_attributes"):
        return f"{name} ({event.marker_recorded_event_attributes.marker_name})"
    if event.HasField("upsert_workflow_search_attributes_event_attributes"):
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        exempt = set(fields.indexed_fields) <= EXEMPT_SEARCH_ATTRIBUTES
        return f"{name} ({'TemporalChangeVersion' if exempt else 'Agent...'})"
    return name


def queued(runs: list[RunFigures], threshold: float) -> bool:
    """Whether model calls queued: the p95 of their schedule-to-start or of their wait is over
    `threshold` seconds."""
    to_start = [s for run in runs for s in run.model_schedule_to_start]
    waits = [s for run in runs for s in run.model_waits]
    return max(percentile(to_start, 0.95), percentile(waits, 0.95)) > threshold


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(int(share * len(ordered)), len(ordered) - 1)]


def environment_of(pid: int) -> dict[str, str]:
    """A process's environment as it started, from /proc. A process just started reads empty
    there for a moment (Popen returns once exec has begun, before the kernel has set the new
    program's environment up; CI once read it so): read again, for up to a second."""
    raw = b""
    for _ in range(50):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return {}
        if raw:
            break
        time.sleep(0.02)
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def message_store_bytes(path: Path) -> int:
    """The bytes of what the message store holds (keys and texts), without the file's slack."""
    if not path.exists():
        return 0
    connection = sqlite3.connect(path)
    try:
        links = connection.execute(
            "SELECT COALESCE(SUM(LENGTH(ref) + LENGTH(COALESCE(parent, '')) "
            "+ LENGTH(COALESCE(message, ''))), 0) FROM links"
        ).fetchone()[0]
        blobs = connection.execute(
            "SELECT COALESCE(SUM(LENGTH(ref) + LENGTH(COALESCE(text, ''))), 0) FROM blobs"
        ).fetchone()[0]
    except sqlite3.OperationalError:  # no table yet: nothing stored
        return 0
    finally:
        connection.close()
    return int(links) + int(blobs)


Workload = str
"""'agent' (AgentWorkflow, worker.py) or 'floor' (bench/floor_workflow.py, bench.floor_worker)."""


@dataclass
class Host:
    client: Client
    queue: str
    worker_pids: list[int]
    server_pids: set[int]
    workload: Workload = "agent"

    def cpu(self) -> tuple[float, float]:
        return (
            sum(cpu_of(pid) for pid in self.worker_pids),
            sum(cpu_of(pid) for pid in self.server_pids),
        )

    def worker_rss(self) -> int:
        return sum(rss_of(pid) for pid in self.worker_pids)


async def history_figures(client: Client, workflow_ids: list[str]) -> list[RunFigures]:
    gate = asyncio.Semaphore(8)

    async def one(workflow_id: str) -> RunFigures:
        async with gate:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
        return read_history(history.events)

    return list(await asyncio.gather(*(one(w) for w in workflow_ids)))


def mean(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.fmean(values) if values else 0.0


def summarise_runs(runs: list[RunFigures]) -> dict[str, Any]:
    """The mean run of a sample."""
    return {
        "events": mean(r.events for r in runs),
        "bytes": mean(r.bytes for r in runs),
        "actions": mean(r.actions for r in runs),
        "workflow_tasks": mean(r.workflow_tasks for r in runs),
        "activities": mean(r.activities for r in runs),
        "model_calls": mean(r.model_calls for r in runs),
        "transactions": mean(r.transactions for r in runs),
        "seconds": {key: mean(r.seconds[key] for r in runs) for key in runs[0].seconds},
    }


async def probe(host: Host, steps: int, delay: float) -> dict[str, Any]:
    """One run of `steps` and one of twice as many, alone: what a step adds, and the rest."""
    rows = {}
    run = workload.run_agent if host.workload == "agent" else workload.run_floor
    for k in (steps, 2 * steps):
        _, workflow_id = await run(host.client, host.queue, k, delay)
        (figures,) = await history_figures(host.client, [workflow_id])
        rows[k] = figures
    per_step, fixed = {}, {}
    for name in ("events", "bytes", "actions", "workflow_tasks", "activities", "transactions"):
        short, long = getattr(rows[steps], name), getattr(rows[2 * steps], name)
        per_step[name] = (long - short) / steps
        fixed[name] = short - per_step[name] * steps
    return {
        "steps": [steps, 2 * steps],
        "runs": {
            str(k): asdict(v) | {"model_schedule_to_start": None, "model_waits": None}
            for k, v in rows.items()
        },
        "per_step": per_step,
        "fixed": fixed,
    }


async def one_run(host: Host, steps: int, delay: float, started: list[str]) -> float:
    workflow_id = f"capacity-{host.workload}-{uuid.uuid4().hex[:12]}"
    started.append(workflow_id)
    began = time.perf_counter()
    # A prompt of its own, as real runs have: the message store keeps content by its hash, and
    # runs that all said the same would share one chain and store nothing new.
    prompt = f"{workload.PROMPT} (run {workflow_id})"
    if host.workload == "floor":
        answer = await host.client.execute_workflow(
            FloorWorkflow.run,
            FloorInput(prompt=prompt, steps=steps, delay_seconds=delay),
            id=workflow_id,
            task_queue=host.queue,
        )
        assert answer == "done", answer
        return time.perf_counter() - began
    chosen = workload.agent_input(steps, delay).model_copy(update={"prompt": prompt})
    result = await host.client.execute_workflow(
        AgentWorkflow.run,
        chosen,
        id=workflow_id,
        task_queue=host.queue,
        # As AgentClient.start sets them (workload.run_agent does the same).
        search_attributes=starting_search_attributes(),
    )
    assert result.steps == steps + 1, result
    return time.perf_counter() - began


async def level(host: Host, rate: float, args: SimpleNamespace, rss_idle: int) -> dict[str, Any]:
    """`rate` runs a second for `--level-seconds`, open-loop, then every run to its end."""
    count = max(1, round(rate * args.level_seconds))
    workflow_ids: list[str] = []
    in_flight = peak_in_flight = 0
    rss_peak = host.worker_rss()

    async def tracked() -> float:
        nonlocal in_flight, peak_in_flight
        in_flight += 1
        peak_in_flight = max(peak_in_flight, in_flight)
        try:
            return await one_run(host, args.steps, args.delay, workflow_ids)
        finally:
            in_flight -= 1

    done = asyncio.Event()

    async def sample_rss() -> None:
        nonlocal rss_peak
        while not done.is_set():
            rss_peak = max(rss_peak, host.worker_rss())
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample_rss())
    worker_before, server_before = host.cpu()
    began = time.perf_counter()
    runs = []
    for i in range(count):
        await asyncio.sleep(max(0.0, began + i / rate - time.perf_counter()))
        runs.append(asyncio.create_task(tracked()))
    arrivals = time.perf_counter() - began
    latencies = await asyncio.gather(*runs)
    seconds = time.perf_counter() - began
    worker_after, server_after = host.cpu()
    done.set()
    await sampler
    chosen = workflow_ids[:: max(1, len(workflow_ids) // args.sample)][: args.sample]
    sample = await history_figures(host.client, chosen)
    to_start = [s for run in sample for s in run.model_schedule_to_start]
    waits = [s for run in sample for s in run.model_waits]
    steps = count * args.steps
    worker_cpu, server_cpu = worker_after - worker_before, server_after - server_before
    return {
        "offered_runs_per_second": rate,
        "runs": count,
        "arrival_seconds": round(arrivals, 2),
        "seconds": round(seconds, 2),
        "completed_runs_per_second": count / seconds,
        "run_seconds_p50": percentile(latencies, 0.5),
        "run_seconds_p95": percentile(latencies, 0.95),
        "model_schedule_to_start_p50": percentile(to_start, 0.5),
        "model_schedule_to_start_p95": percentile(to_start, 0.95),
        "model_wait_p50": percentile(waits, 0.5),
        "model_wait_p95": percentile(waits, 0.95),
        "model_calls_sampled": len(to_start),
        "queued": queued(sample, args.threshold),
        "worker_cpu_seconds": worker_cpu,
        "server_cpu_seconds": server_cpu,
        "worker_cpu_seconds_per_step": worker_cpu / steps,
        "server_cpu_seconds_per_step": server_cpu / steps,
        "worker_cores_busy": worker_cpu / seconds,
        "server_cores_busy": server_cpu / seconds,
        "peak_runs_in_flight": peak_in_flight,
        "worker_rss_peak_bytes": rss_peak,
        "memory_bytes_per_cached_run": max(rss_peak - rss_idle, 0) / max(peak_in_flight, 1),
        "sampled_runs": len(sample),
        "run": summarise_runs(sample),
    }


def memory_per_cached_run(levels: list[dict[str, Any]]) -> float:
    """The workers' RSS a run in the cache adds: the slope of the levels' peak RSS over their
    peak runs in flight (least squares). A level's own RSS growth over idle, divided by its runs,
    also counts what any load adds once (buffers, the allocator's arenas): at 7 runs open it
    read 2.9 MB a run, at 118 runs 0.8 MB. With fewer than two distinct levels, that ratio's
    largest."""
    points = [(row["peak_runs_in_flight"], row["worker_rss_peak_bytes"]) for row in levels]
    if len({runs for runs, _ in points}) < 2:
        return float(max(row["memory_bytes_per_cached_run"] for row in levels))
    mean_runs = sum(runs for runs, _ in points) / len(points)
    mean_rss = sum(rss for _, rss in points) / len(points)
    covariance = sum((runs - mean_runs) * (rss - mean_rss) for runs, rss in points)
    variance = sum((runs - mean_runs) ** 2 for runs, _ in points)
    return max(covariance / variance, 0.0)


def summary(levels: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """The sustainable rate (the last level that did not queue) and what it moves a second."""
    sustained = [row for row in levels if not row["queued"]]
    best = sustained[-1] if sustained else levels[0]
    saturated = next((row for row in levels if row["queued"]), None)
    rate = best["offered_runs_per_second"] if sustained else 0.0
    run = best["run"]
    return {
        "saturated": saturated is not None,
        "sustainable_runs_per_second": rate,
        "steps_per_run": steps,
        "steps_per_second": rate * steps,
        "workflow_tasks_per_second": rate * run["workflow_tasks"],
        "activities_per_second": rate * run["activities"],
        "model_calls_per_second": rate * run["model_calls"],
        "actions_per_second": rate * run["actions"],
        "history_events_per_second": rate * run["events"],
        "history_bytes_per_second": rate * run["bytes"],
        "worker_cpu_seconds_per_step": best["worker_cpu_seconds_per_step"],
        "server_cpu_seconds_per_step": best["server_cpu_seconds_per_step"],
        "memory_bytes_per_cached_run": memory_per_cached_run(levels),
        "at_saturation": None
        if saturated is None
        else {
            "offered_runs_per_second": saturated["offered_runs_per_second"],
            "model_schedule_to_start_p95": saturated["model_schedule_to_start_p95"],
            "model_wait_p95": saturated["model_wait_p95"],
            "run_seconds": saturated["run"]["seconds"],
            "worker_cores_busy": saturated["worker_cores_busy"],
            "server_cores_busy": saturated["server_cores_busy"],
        },
    }


FLOOR_WORKER = ("-m", "bench.floor_worker")
"""The floor's worker processes (`python -m bench.floor_worker`)."""


async def measure_processes(
    client: Client, address: str, processes: int, args: SimpleNamespace, scratch: Path
) -> dict[str, Any]:
    """The agent's row for `processes` worker processes, with the floor's beside it (`floor`):
    the same stepped rates on the same server, level by level, the agent's level first."""
    suffix = f"{processes}-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "AGENT_MESSAGE_STORE": str(scratch / f"messages-{processes}.db"),
        "AGENT_RESULT_STORE": str(scratch / f"results-{processes}.db"),
        "AGENT_DEMO_DB": str(scratch / "demo.db"),
    }
    if args.sandbox:
        env[SANDBOX_VARIABLE] = args.sandbox
    server_pids = children_of_self()
    agents = start_worker_processes(address, f"bench-capacity-{suffix}", processes, env)
    floors = start_worker_processes(
        address, f"bench-floor-{suffix}", processes, env, command=FLOOR_WORKER
    )
    hosts = {
        "agent": Host(client, f"bench-capacity-{suffix}", [w.pid for w in agents], server_pids),
        "floor": Host(
            client, f"bench-floor-{suffix}", [w.pid for w in floors], server_pids, "floor"
        ),
    }
    sandboxes = [environment_of(w.pid).get(SANDBOX_VARIABLE, "") for w in agents]
    rows: dict[str, dict[str, Any]] = {name: {"levels": []} for name in hosts}
    try:
        # Every process polls and imports everything before anything is measured.
        await asyncio.gather(
            *(workload.run_agent(client, hosts["agent"].queue, 1) for _ in range(4 * processes)),
            *(workload.run_floor(client, hosts["floor"].queue, 1) for _ in range(4 * processes)),
        )
        for name, host in hosts.items():
            rows[name]["worker_rss_idle_bytes"] = host.worker_rss()
            rows[name]["probe"] = await probe(host, args.steps, args.delay)
        store = scratch / f"messages-{processes}.db"
        store_before, agent_runs = message_store_bytes(store), 0
        rate = args.start_rate
        for _ in range(args.max_levels):
            going = [name for name in hosts if not _queued_already(rows[name]["levels"])]
            if not going:
                break
            for name in going:
                print(
                    f"capacity: {name}, {processes} process(es), {rate:g} runs/s", file=sys.stderr
                )
                row = await level(hosts[name], rate, args, rows[name]["worker_rss_idle_bytes"])
                rows[name]["levels"].append(row)
                agent_runs += row["runs"] if name == "agent" else 0
            rate = round(rate * args.rate_factor, 3)
        store_bytes = message_store_bytes(store) - store_before
    finally:
        stop_worker_processes([*agents, *floors])
    agent, floor = rows["agent"], rows["floor"]
    for row in (agent, floor):
        row["summary"] = summary(row["levels"], args.steps)
    return {
        "worker_processes": processes,
        # What the processes were given, read back from them: the setting the figures hold for.
        "worker_sandbox_settings": sandboxes,
        "worker_rss_idle_bytes": agent["worker_rss_idle_bytes"],
        "message_store_bytes_per_run": store_bytes / max(agent_runs, 1),
        "probe": agent["probe"],
        "levels": agent["levels"],
        "summary": agent["summary"],
        "floor": floor,
        "against_floor": against_floor(agent, floor, args.steps),
    }


def _queued_already(levels: list[dict[str, Any]]) -> bool:
    return bool(levels) and levels[-1]["queued"]


FLOOR_RATIO_GOAL = 0.9
"""The agent sustains at least this share of the floor's runs a second (issue 42)."""


def against_floor(agent: dict[str, Any], floor: dict[str, Any], steps: int) -> dict[str, Any]:
    """The agent's sustainable rate over the floor's, and what a run of each costs: events (by
    type, where they differ), worker and dev-server CPU a step."""
    a, f = agent["summary"], floor["summary"]
    ratio = (
        a["sustainable_runs_per_second"] / f["sustainable_runs_per_second"]
        if f["sustainable_runs_per_second"]
        else None
    )
    a_run, f_run = agent["probe"]["runs"][str(steps)], floor["probe"]["runs"][str(steps)]
    kinds = sorted(set(a_run["kinds"]) | set(f_run["kinds"]))
    more = {
        kind: a_run["kinds"].get(kind, 0) - f_run["kinds"].get(kind, 0)
        for kind in kinds
        if a_run["kinds"].get(kind, 0) != f_run["kinds"].get(kind, 0)
    }
    return {
        "agent_runs_per_second": a["sustainable_runs_per_second"],
        "floor_runs_per_second": f["sustainable_runs_per_second"],
        "ratio": ratio,
        "goal": FLOOR_RATIO_GOAL,
        "met": ratio is not None and ratio >= FLOOR_RATIO_GOAL,
        "events_a_run": {"agent": a_run["events"], "floor": f_run["events"]},
        "events_a_step": {
            "agent": agent["probe"]["per_step"]["events"],
            "floor": floor["probe"]["per_step"]["events"],
        },
        "events_the_agent_has_more_of": more,
        "worker_cpu_seconds_per_step": {
            "agent": a["worker_cpu_seconds_per_step"],
            "floor": f["worker_cpu_seconds_per_step"],
        },
        "server_cpu_seconds_per_step": {
            "agent": a["server_cpu_seconds_per_step"],
            "floor": f["server_cpu_seconds_per_step"],
        },
    }


def report(figures: dict[str, Any]) -> str:
    m = figures["machine"]
    lines = [
        f"{figures['steps']}-step runs, model {1000 * figures['delay_seconds']:.0f} ms a call, "
        f"sandbox {figures['sandbox']}; {m['cpus']} cores, {m['memory_gib']} GiB, load average "
        f"{figures['load_average_before']} before",
        "| worker processes | sustainable runs/s | steps/s | workflow tasks/s | activities/s "
        "| actions/s | events/s | history KB/s | worker CPU a step | memory a cached run "
        "| queued at |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in figures["processes"]:
        s = row["summary"]
        queued_at = s["at_saturation"]["offered_runs_per_second"] if s["saturated"] else "-"
        lines.append(
            f"| {row['worker_processes']} | {s['sustainable_runs_per_second']:g} "
            f"| {s['steps_per_second']:.1f} | {s['workflow_tasks_per_second']:.1f} "
            f"| {s['activities_per_second']:.1f} | {s['actions_per_second']:.1f} "
            f"| {s['history_events_per_second']:.0f} | {s['history_bytes_per_second'] / 1000:.1f} "
            f"| {1000 * s['worker_cpu_seconds_per_step']:.1f} ms "
            f"| {s['memory_bytes_per_cached_run'] / 1024:.0f} KiB | {queued_at} |"
        )
    for row in figures["processes"]:
        s = row["summary"]
        if not s["saturated"]:
            lines.append(
                f"{row['worker_processes']} process(es): never queued (raise --max-levels)"
            )
            continue
        at = s["at_saturation"]
        spent = at["run_seconds"]
        parts = ", ".join(
            f"{name.replace('_', ' ')} {spent[name]:.2f} s" for name in spent if name != "wall"
        )
        lines.append(
            f"{row['worker_processes']} process(es), saturated at "
            f"{at['offered_runs_per_second']:g} runs/s (model calls' p95 schedule-to-start "
            f"{at['model_schedule_to_start_p95']:.2f} s, p95 wait {at['model_wait_p95']:.2f} s): "
            f"a run's {spent['wall']:.2f} s = {parts}; "
            f"cores busy: workers {at['worker_cores_busy']:.2f}, dev server "
            f"{at['server_cores_busy']:.2f}"
        )
    lines += floor_lines(figures)
    return "\n".join(lines)


def floor_lines(figures: dict[str, Any]) -> list[str]:
    """The agent against the floor, on the same server at the same rates: both sustainable
    rates, their ratio, and where a run of each differs (events by type, CPU a step)."""
    rows = [row for row in figures["processes"] if "against_floor" in row]
    if not rows:
        return []
    lines = [
        "",
        "| worker processes | agent runs/s | floor runs/s | agent / floor | events a run, agent "
        "/ floor | worker CPU a step, agent / floor | dev server CPU a step, agent / floor |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        c = row["against_floor"]
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}x"
        goal = f"{ratio} ({'met' if c['met'] else 'MISSED'}: goal {c['goal']}x)"
        w, s, e = (
            c["worker_cpu_seconds_per_step"],
            c["server_cpu_seconds_per_step"],
            c["events_a_run"],
        )
        lines.append(
            f"| {row['worker_processes']} | {c['agent_runs_per_second']:g} "
            f"| {c['floor_runs_per_second']:g} | {goal} | {e['agent']:.0f} / {e['floor']:.0f} "
            f"| {1000 * w['agent']:.1f} / {1000 * w['floor']:.1f} ms "
            f"| {1000 * s['agent']:.1f} / {1000 * s['floor']:.1f} ms |"
        )
    first = rows[0]["against_floor"]
    more = ", ".join(
        f"{kind} {'+' if n > 0 else ''}{n}"
        for kind, n in first["events_the_agent_has_more_of"].items()
    )
    lines.append(
        f"What a {figures['steps']}-step run of the agent has that the floor's does not (events): "
        f"{more or 'nothing'}."
    )
    return lines


QUICK = {
    "processes": "1",
    "steps": 2,
    "delay": 0.05,
    "start_rate": 2.0,
    "rate_factor": 2.0,
    "level_seconds": 2.0,
    "max_levels": 2,
    "sample": 5,
}


COUNT = click.IntRange(min=1)
ABOVE_0 = click.FloatRange(min=0, min_open=True)


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--processes", default="1,2", help="worker process counts, e.g. 1,2")
@click.option("--steps", type=COUNT, default=10, help="tool-calling steps a run")
@click.option("--delay", type=float, default=0.2, help="model latency, seconds")
@click.option("--start-rate", type=ABOVE_0, default=2.0, help="runs a second, first")
@click.option("--rate-factor", type=float, default=1.5)
@click.option("--level-seconds", type=ABOVE_0, default=30.0)
@click.option("--max-levels", type=COUNT, default=10)
@click.option("--threshold", type=ABOVE_0, default=1.0, help="p95 schedule-to-start, s")
@click.option("--sample", type=COUNT, default=40, help="histories read a level")
@click.option("--sandbox", type=click.Choice(("stock", "fast")), help=f"sets {SANDBOX_VARIABLE}")
@click.option("--json", type=click.Path(path_type=Path), default=DEFAULT_JSON)
@click.option("--quick", is_flag=True, help="a tiny run: figures mean nothing")
def command_line(**options: Any) -> SimpleNamespace:
    args = SimpleNamespace(**options)
    if args.quick:
        source = click.get_current_context().get_parameter_source
        for name, value in QUICK.items():
            if source(name) == ParameterSource.DEFAULT:
                setattr(args, name, value)
    try:
        args.process_counts = [int(p) for p in args.processes.split(",")]
    except ValueError:
        refuse(f"--processes: {args.processes!r} is not a list of counts such as 1,2")
    if any(p < 1 for p in args.process_counts):
        refuse("--processes: each count must be at least 1")
    if args.rate_factor <= 1:
        refuse("--rate-factor must be above 1, or the rate never rises")
    return args


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    figures: dict[str, Any] = {
        "taken_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(),
        "load_average_before": load_average(),
        "steps": args.steps,
        "delay_seconds": args.delay,
        "threshold_seconds": args.threshold,
        "level_seconds": args.level_seconds,
        "sandbox": args.sandbox or "worker default",
        "quick": args.quick,
        "processes": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        database = Path(scratch) / "temporal.db"
        async with embedded_dev_server(extra_args=["--db-filename", str(database)]) as env:
            address = env.client.service_client.config.target_host
            for processes in args.process_counts:
                figures["processes"].append(
                    await measure_processes(env.client, address, processes, args, Path(scratch))
                )
    figures["load_average_after"] = load_average()
    print(report(figures))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(figures, indent=2))
    print(f"figures: {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
