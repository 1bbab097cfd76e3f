"""The benchmark suite: what durability costs, against the floor, the bare loop and the peers.

    python -m bench [--quick] [--json PATH]

Every figure comes from one process and one machine, measured side by side: medians of at least
five runs, the systems compared interleaved run by run (A B A B), ratios taken between medians of
the same process. Absolute times on a shared machine are noise; the ratios are the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import click
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from bench import workload
from durable_agent.serving.command_line import Command, parse, refuse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker, replayer as worker_replayer

RUNS = 5
"""Runs per median: the issue's minimum."""

SHIPPED_TRANSFER_QUEUE_RPS = 20
"""The dev server's own history.transferProcessorMaxPollRPS (measured: setting 20 explicitly
paces runs exactly as leaving it alone does)."""


def dev_server(transfer_queue_rps: int) -> contextlib.AbstractAsyncContextManager[Any]:
    """The embedded dev server with this transfer-queue poll rate. Given explicitly, last on the
    command line, so it wins over whatever worker.embedded_dev_server passes by default."""
    setting = f"history.transferProcessorMaxPollRPS={transfer_queue_rps}"
    return embedded_dev_server(extra_args=["--dynamic-config-value", setting])


@dataclass
class Row:
    section: str
    name: str
    value: str
    target: str = ""
    met: bool | None = None
    """None: the row has no target."""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def add(self, section: str, name: str, value: str, target: str = "", met: bool | None = None):
        self.rows.append(Row(section, name, value, target, met))


@dataclass
class Workers:
    client: Client
    agent_queue: str
    floor_queue: str
    floor_passed_through_queue: str
    """The floor on the agent's sandbox settings (sandbox_runner.WORKFLOW_RUNNER): what of the
    difference is the agent's code, and what the sandbox's cost a run."""


@contextlib.asynccontextmanager
async def workers(env: WorkflowEnvironment) -> AsyncIterator[Workers]:
    """One agent worker and one floor worker, in this process, each on its own task queue."""
    client = env.client
    agent_queue, floor_queue = f"bench-agent-{uuid.uuid4()}", f"bench-floor-{uuid.uuid4()}"
    passed_through = f"bench-floor-passed-through-{uuid.uuid4()}"
    async with (
        build_worker(client, agent_queue),
        workload.floor_worker(client, floor_queue),
        workload.floor_worker(
            client, passed_through, workflow_runner=workload.FLOOR_PASSED_THROUGH
        ),
    ):
        yielded = Workers(client, agent_queue, floor_queue, passed_through)
        # Warm up each: the first run of a workflow type pays for its sandbox's imports.
        await workload.run_agent(client, agent_queue, 1)
        await workload.run_floor(client, floor_queue, 1)
        await workload.run_floor(client, passed_through, 1)
        yield yielded


class Sample(NamedTuple):
    seconds: float
    workflow_id: str
    worker_cpu: float
    """CPU seconds of this process (the worker and the client) during the run."""
    server_cpu: float
    """CPU seconds of the dev server (this process's child) during the run."""


def cpu_seconds() -> tuple[float, float]:
    """(this process, its child processes that still run: the dev server), in CPU seconds."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = 0.0
    for listing in Path("/proc/self/task").glob("*/children"):
        for pid in listing.read_text().split():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                children += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return usage.ru_utime + usage.ru_stime, children


async def interleaved(
    runs: int, *systems: Callable[[], Awaitable[tuple[float, str]]]
) -> list[list[Sample]]:
    """Each system once per round, in turn, for `runs` rounds: A B A B, so drift hits both."""
    results: list[list[Sample]] = [[] for _ in systems]
    for _ in range(runs):
        for position, system in enumerate(systems):
            worker_before, server_before = cpu_seconds()
            seconds, workflow_id = await system()
            worker_after, server_after = cpu_seconds()
            results[position].append(
                Sample(
                    seconds,
                    workflow_id,
                    worker_after - worker_before,
                    server_after - server_before,
                )
            )
    return results


def median(samples: list[Sample], field: str = "seconds") -> float:
    return statistics.median(getattr(sample, field) for sample in samples)


async def history_of(client: Client, workflow_id: str) -> dict[str, int]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return {
        "events": len(history.events),
        # What the server stores: the events' protobuf bytes.
        "bytes": sum(event.ByteSize() for event in history.events),
    }


async def overhead(
    report: Report, w: Workers, steps_list: list[int], runs: int, label: str = ""
) -> dict[str, Any]:
    """A K-step agent run against the floor and the bare loop."""
    figures: dict[str, Any] = {}
    section = f"overhead{label}"
    for steps in steps_list:
        floor, agent, whole, local, floor_through = await interleaved(
            runs,
            lambda s=steps: workload.run_floor(w.client, w.floor_queue, s),
            lambda s=steps: workload.run_agent(w.client, w.agent_queue, s),
            # The agent without its message store: what the linear history costs in time.
            lambda s=steps: workload.run_agent(w.client, w.agent_queue, s, linear_history=False),
            # The same lookup declared @tool(local=True): a local activity a call.
            lambda s=steps: workload.run_agent(w.client, w.agent_queue, s, local_tool=True),
            lambda s=steps: workload.run_floor(w.client, w.floor_passed_through_queue, s),
        )
        bare = statistics.median([await workload.run_bare(steps) for _ in range(runs)])
        ratio = median(agent) / median(floor)
        figures[str(steps)] = {
            "floor_seconds": [s.seconds for s in floor],
            "agent_seconds": [s.seconds for s in agent],
            "agent_whole_transcript_seconds": [s.seconds for s in whole],
            "floor_worker_cpu_median": median(floor, "worker_cpu"),
            "agent_worker_cpu_median": median(agent, "worker_cpu"),
            "agent_whole_transcript_worker_cpu_median": median(whole, "worker_cpu"),
            "floor_server_cpu_median": median(floor, "server_cpu"),
            "agent_server_cpu_median": median(agent, "server_cpu"),
            "bare_seconds_median": bare,
            "floor_median": median(floor),
            "agent_median": median(agent),
            "agent_whole_transcript_median": median(whole),
            "agent_local_tool_seconds": [s.seconds for s in local],
            "agent_local_tool_median": median(local),
            "agent_local_tool_worker_cpu_median": median(local, "worker_cpu"),
            "floor_passed_through_worker_cpu_median": median(floor_through, "worker_cpu"),
            "floor_passed_through_median": median(floor_through),
            "ratio": ratio,
            "agent_workflow_id": agent[0].workflow_id,
            "floor_workflow_id": floor[0].workflow_id,
        }
        report.add(section, f"K={steps}: floor (plain workflow)", f"{median(floor):.3f} s")
        report.add(
            section,
            f"K={steps}: agent",
            f"{median(agent):.3f} s = {ratio:.2f}x floor "
            f"({1000 * (median(agent) - median(floor)) / steps:.1f} ms a step over it)",
            "<= 1.15x floor" if not label else "",
            ratio <= 1.15 if not label else None,
        )
        report.add(
            section,
            f"K={steps}: agent, linear_history=False",
            f"{median(whole):.3f} s = {median(whole) / median(floor):.2f}x floor",
        )
        local_ratio = median(local) / median(floor)
        report.add(
            section,
            f"K={steps}: agent, local tool",
            f"{median(local):.3f} s = {local_ratio:.2f}x floor",
            "<= 1.00x floor" if not label else "",
            local_ratio <= 1.0 if not label else None,
        )
        systems = (
            ("agent", agent),
            ("agent, linear_history=False", whole),
            ("agent, local tool", local),
            ("floor on the agent's sandbox settings", floor_through),
        )
        for system, samples in systems:
            report.add(
                section,
                f"K={steps}: CPU, {system} / floor",
                f"worker {1000 * median(samples, 'worker_cpu') / steps:.1f} / "
                f"{1000 * median(floor, 'worker_cpu') / steps:.1f} ms a step "
                f"({median(samples, 'worker_cpu') / median(floor, 'worker_cpu'):.2f}x); "
                f"dev server {1000 * median(samples, 'server_cpu') / steps:.1f} / "
                f"{1000 * median(floor, 'server_cpu') / steps:.1f} ms a step "
                f"({median(samples, 'server_cpu') / max(median(floor, 'server_cpu'), 1e-9):.2f}x)",
            )
        if not label:
            report.add(
                section,
                f"K={steps}: bare loop (no Temporal)",
                f"{bare * 1000:.2f} ms; durability costs "
                f"{1000 * (median(agent) - bare) / steps:.0f} ms a step",
            )
    return figures


async def history(report: Report, w: Workers, steps_list: list[int]) -> dict[str, Any]:
    """Events and bytes per run: one run each (a run's history is deterministic in size)."""
    figures: dict[str, Any] = {}
    for steps in steps_list:
        _, agent_id = await workload.run_agent(w.client, w.agent_queue, steps)
        _, local_id = await workload.run_agent(w.client, w.agent_queue, steps, local_tool=True)
        _, floor_id = await workload.run_floor(w.client, w.floor_queue, steps)
        agent, floor = await history_of(w.client, agent_id), await history_of(w.client, floor_id)
        local = await history_of(w.client, local_id)
        figures[str(steps)] = {
            "agent": agent,
            "agent, local tool": local,
            "floor": floor,
            "agent_workflow_id": agent_id,
        }
        report.add(
            "history",
            f"K={steps}: agent, local tool",
            f"{local['events']} events ({local['events'] / steps:.1f} a step), "
            f"{local['bytes']:,} B ({local['bytes'] / steps:,.0f} B a step)",
        )
        report.add(
            "history",
            f"K={steps}: agent",
            f"{agent['events']} events ({agent['events'] / steps:.1f} a step), "
            f"{agent['bytes']:,} B ({agent['bytes'] / steps:,.0f} B a step)",
        )
        report.add(
            "history",
            f"K={steps}: floor",
            f"{floor['events']} events ({floor['events'] / steps:.1f} a step), "
            f"{floor['bytes']:,} B ({floor['bytes'] / steps:,.0f} B a step)",
        )
    first, last = steps_list[0], steps_list[-1]
    for system in ("agent", "agent, local tool", "floor"):
        added = figures[str(last)][system]["events"] - figures[str(first)][system]["events"]
        figures[f"{system}_events_per_step"] = added / (last - first)
        local = system == "agent, local tool"
        report.add(
            "history",
            f"{system}: each step adds (K={first} to K={last})",
            f"{added / (last - first):.1f} events",
            "<= 9 events" if local else "",
            added / (last - first) <= 9 if local else None,
        )
    per_step = [figures[str(k)]["agent"]["bytes"] / k for k in (first, last)]
    growth = per_step[1] / per_step[0]
    figures["bytes_per_step_growth"] = growth
    report.add(
        "history",
        f"agent bytes a step, K={last} / K={first}",
        f"{growth:.2f}x",
        "linear: about 1x",
        growth <= 1.3,
    )
    return figures


async def replay(report: Report, client: Client, workflow_id: str, steps: int, runs: int) -> dict:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    replayer = worker_replayer()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await replayer.replay_workflow(history)
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    report.add(
        "replay",
        f"Replayer, {steps}-step history ({len(history.events)} events)",
        f"{seconds:.3f} s ({1000 * seconds / steps:.1f} ms a step)",
    )
    return {"steps": steps, "events": len(history.events), "seconds": times, "median": seconds}


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Batch(NamedTuple):
    seconds: float
    rss_before: int
    rss_peak: int
    worker_cpu: float
    server_cpu: float


async def batch(runs: int, start: Callable[[], Awaitable[object]]) -> Batch:
    """`runs` concurrent runs: their time, this process's RSS and both sides' CPU."""
    baseline = peak = rss_bytes()
    worker_before, server_before = cpu_seconds()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_bytes())
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    await asyncio.gather(*(start() for _ in range(runs)))
    seconds = time.perf_counter() - started
    done.set()
    await sampler
    worker_after, server_after = cpu_seconds()
    return Batch(
        seconds, baseline, peak, worker_after - worker_before, server_after - server_before
    )


async def throughput(report: Report, runs: int, steps: int, delay: float) -> dict[str, Any]:
    """`runs` concurrent K-step runs on one worker, every model call taking `delay` seconds: the
    floor's batch, the agent's and the agent's with its local tool, each on a fresh worker and a
    fresh dev server. (On one in-memory server, each batch paid for the runs the others and the
    earlier sections left in it: the agent's batch, run second, measured 1.7x the floor's
    dev-server CPU, and 1.0x on a server of its own.)"""
    # Slots for every run's activity at once: the latency bound is the ideal, not a slot count.
    options = {"max_concurrent_activities": max(runs, 100)}

    async def on_a_fresh_server(
        name: str, serve: Callable[[Client, str], Any], run: Callable[..., Awaitable[object]]
    ) -> Batch:
        async with dev_server(10_000) as env:
            queue = f"bench-throughput-{name}-{uuid.uuid4()}"
            async with serve(env.client, queue):
                await run(env.client, queue, 1)
                return await batch(runs, lambda: run(env.client, queue, steps, delay))

    def agent_worker(client: Client, queue: str) -> Any:
        return build_worker(client, queue, **options)

    floor = await on_a_fresh_server(
        "floor",
        lambda client, queue: workload.floor_worker(client, queue, **options),
        workload.run_floor,
    )
    agent = await on_a_fresh_server("agent", agent_worker, workload.run_agent)
    local = await on_a_fresh_server(
        "agent-local",
        agent_worker,
        lambda *args: workload.run_agent(*args, local_tool=True),
    )
    ideal = (steps + 1) * delay
    ratio = agent.seconds / ideal
    cores = os.cpu_count() or 1
    for name, taken in (("floor", floor), ("agent", agent), ("agent, local tool", local)):
        report.add(
            "throughput",
            f"{runs} concurrent {steps}-step runs, model {1000 * delay:.0f} ms a call: {name}",
            f"{taken.seconds:.2f} s = {taken.seconds / ideal:.2f}x the ideal {ideal:.1f} s "
            f"({steps + 1} calls x {delay:g} s); CPU: worker {taken.worker_cpu:.1f} s, "
            f"dev server {taken.server_cpu:.1f} s, so at least "
            f"{(taken.worker_cpu + taken.server_cpu) / cores:.1f} s on {cores} cores",
            "<= 1.25x ideal" if name == "agent" else "",
            ratio <= 1.25 if name == "agent" else None,
        )
    floor_cpu = (floor.worker_cpu + floor.server_cpu) / runs
    for name, taken in (("agent", agent), ("agent, local tool", local)):
        cpu = (taken.worker_cpu + taken.server_cpu) / runs
        report.add(
            "throughput",
            f"CPU a run (worker + dev server), {name} / floor",
            f"{1000 * cpu:.0f} / {1000 * floor_cpu:.0f} ms ({cpu / floor_cpu:.2f}x)",
            "<= 1.10x floor",
            cpu / floor_cpu <= 1.10,
        )
    report.add(
        "throughput",
        "agent worker process: peak RSS; growth over idle / runs",
        f"{agent.rss_peak / 2**20:.0f} MiB; {(agent.rss_peak - agent.rss_before) / 2**20:.0f} MiB"
        f" / {runs} = {(agent.rss_peak - agent.rss_before) / runs / 1024:.0f} KiB a cached run",
    )
    return {
        "runs": runs,
        "steps": steps,
        "delay_seconds": delay,
        "floor": floor._asdict(),
        "agent": agent._asdict(),
        "agent_local_tool": local._asdict(),
        "total_seconds": agent.seconds,
        "ideal_seconds": ideal,
        "ratio": ratio,
        "rss_baseline_bytes": agent.rss_before,
        "rss_peak_bytes": agent.rss_peak,
    }


async def tokens(report: Report, client: Client, steps_list: list[int]) -> list[dict[str, Any]]:
    from bench import tokens as token_bench

    rows = [await token_bench.measure(client, steps, "gpt-4o-mini") for steps in steps_list]
    for row in rows:
        report.add(
            "tokens",
            f"K={row['steps']}: input tokens, cache share",
            f"{row['input_tokens']:,} tokens ({row['input_tokens'] / row['steps']:,.0f} a call), "
            f"{row['cached_share']:.0%} cacheable",
        )
    return rows


async def pacing(report: Report, steps: int, runs: int) -> dict[str, Any]:
    """The same K-step runs on a dev server as the temporal CLI ships it."""
    async with dev_server(SHIPPED_TRANSFER_QUEUE_RPS) as env, workers(env) as w:
        figures = await overhead(report, w, [steps], runs, label=": dev server as shipped")
    return figures


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    with open("/proc/meminfo") as meminfo:
        total_kib = int(meminfo.readline().split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(total_kib / 2**20, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def table(report: Report) -> str:
    lines = ["| section | measure | value | target |", "|---|---|---|---|"]
    for row in report.rows:
        mark = "" if row.met is None else (" (met)" if row.met else " (MISSED)")
        lines.append(f"| {row.section} | {row.name} | {row.value} | {row.target}{mark} |")
    return "\n".join(lines)


@dataclass(frozen=True)
class Plan:
    """How much of each section a mode runs."""

    mode: str
    runs: int
    overhead_steps: list[int]
    history_steps: list[int]
    throughput_runs: int
    throughput_steps: int
    model_delay: float
    token_steps: list[int]


PLANS = {
    "full": Plan("full", RUNS, [10, 40], [10, 40, 100], 200, 10, 0.2, [10, 40]),
    "quick": Plan("quick", RUNS, [10], [10, 40, 100], 20, 10, 0.2, [10]),
    # The smoke test's: every section runs, on figures too small to mean anything.
    "tiny": Plan("tiny", 3, [4], [4, 8, 16], 4, 3, 0.05, [4]),
}


async def run_suite(plan: Plan, peers: bool) -> Report:
    report = Report()
    figures = report.figures
    figures["machine"] = machine()
    figures["mode"] = plan.mode
    figures["load_average_before"] = load_average()
    started = time.perf_counter()
    timings = figures["section_seconds"] = {}

    async def timed(name: str, work: Awaitable[Any]) -> Any:
        began = time.perf_counter()
        print(f"bench: {name}...", file=sys.stderr, flush=True)
        result = await work
        timings[name] = round(time.perf_counter() - began, 1)
        return result

    longest = plan.history_steps[-1]
    async with dev_server(10_000) as env:
        async with workers(env) as w:
            figures["overhead"] = await timed(
                "overhead", overhead(report, w, plan.overhead_steps, plan.runs)
            )
            figures["history"] = await timed("history", history(report, w, plan.history_steps))
            longest_id = figures["history"][str(longest)]["agent_workflow_id"]
            figures["replay"] = await timed(
                "replay", replay(report, w.client, longest_id, longest, plan.runs)
            )
            if peers:
                from bench import peers as peer_bench

                figures["peers"] = await timed(
                    "peers", peer_bench.run(report, w, plan.overhead_steps, plan.runs)
                )
        figures["tokens"] = await timed("tokens", tokens(report, env.client, plan.token_steps))
    figures["throughput"] = await timed(
        "throughput",
        throughput(report, plan.throughput_runs, plan.throughput_steps, plan.model_delay),
    )
    figures["pacing"] = await timed("pacing", pacing(report, plan.overhead_steps[0], plan.runs))
    figures["load_average_after"] = load_average()
    figures["seconds"] = time.perf_counter() - started
    return report


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--quick", is_flag=True, help="a run of under two minutes")
@click.option("--tiny", is_flag=True, help="a smoke test: figures mean nothing")
@click.option("--json", type=Path, help="write every figure here")
@click.option("--no-peers", is_flag=True, help="skip Pydantic AI and OpenAI Agents")
def command_line(**options: Any) -> SimpleNamespace:
    if options["quick"] and options["tiny"]:
        refuse("--quick or --tiny, not both")
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_MESSAGE_STORE"] = str(Path(scratch) / "messages.db")
        os.environ["AGENT_RESULT_STORE"] = str(Path(scratch) / "results.db")
        os.environ["AGENT_DEMO_DB"] = str(Path(scratch) / "demo.db")
        plan = PLANS["quick" if args.quick else "tiny" if args.tiny else "full"]
        # The SDK core logs its warnings (slow workflow tasks, say) on stdout: while the suite
        # runs, stdout goes to stderr, so that stdout holds the table alone.
        sys.stdout.flush()
        saved_stdout = os.dup(1)
        os.dup2(2, 1)
        try:
            report = await run_suite(plan, peers=not args.no_peers)
        finally:
            sys.stdout.flush()
            os.dup2(saved_stdout, 1)
            os.close(saved_stdout)
    figures = report.figures
    print(
        f"{figures['mode']} run, {figures['seconds']:.0f} s; "
        f"{figures['machine']['cpus']} cores, {figures['machine']['memory_gib']} GiB; "
        f"load average {figures['load_average_before']} before, "
        f"{figures['load_average_after']} after"
    )
    print(table(report))
    if args.json:
        payload = {**figures, "rows": [row.__dict__ for row in report.rows]}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0
