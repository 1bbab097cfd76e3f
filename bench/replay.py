"""How long a long run's history takes to replay, as a worker does after a restart mid-run.

    python bench/replay.py [--steps 500] [--runs 3] [--json FILE]

Runs the suite's workload (bench/workload.py: a lookup a step, scripted model) for `--steps`
steps on the embedded dev server, twice: with the lookup as a normal activity and declared
`local=True`. A run that long continues as new when Temporal suggests it, so a worker that
restarts mid-run replays one run of the chain: this replays the longest in a fresh process, as
a restarted worker does, with the worker's replayer (worker.replayer): once cold, then `--runs`
times, and reports the cold time and the median of the others. Issue 21's target: a 500-step
history replays in under 2 s.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.client import Client, WorkflowHistory

from bench import workload
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker, replayer as worker_replayer


async def measure(client: Client, task_queue: str, steps: int, runs: int, local: bool) -> Any:
    _, workflow_id = await workload.run_agent(client, task_queue, steps, local_tool=local)
    # A long run continues as new when Temporal suggests it: a worker that restarts replays the
    # run of the chain it is in, so the longest of them is the worst case.
    chain = [r async for r in client.list_workflows(f"WorkflowId='{workflow_id}'")]
    histories = [
        await client.get_workflow_handle(workflow_id, run_id=r.run_id).fetch_history()
        for r in chain
    ]
    longest = max(histories, key=lambda h: len(h.events))
    cold, *times = replay_in_a_fresh_process(longest, runs)
    return {
        "tool": "local" if local else "activity",
        "steps": steps,
        "runs_in_chain": len(histories),
        "events": sum(len(h.events) for h in histories),
        "longest_run_events": len(longest.events),
        "cold_seconds": cold,
        "seconds": times,
        "median": statistics.median(times),
    }


def replay_in_a_fresh_process(history: WorkflowHistory, runs: int) -> list[float]:
    """Seconds for a cold replay and `runs` more, in a new process as a restarted worker has: not in
    this one, which still holds the run it served, its caches and the dev server's client."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "history.json"
        path.write_text(history.to_json())
        done = subprocess.run(
            [sys.executable, __file__, "--replay-history", str(path), "--runs", str(runs)],
            check=True,
            capture_output=True,
            text=True,
        )
    return [float(seconds) for seconds in json.loads(done.stdout.splitlines()[-1])]


async def replay_history(path: Path, runs: int) -> list[float]:
    """What the fresh process does: the worker's replayer, once cold (the first replay imports
    what the sandbox needs), then `runs` times more; the cold time first."""
    history = WorkflowHistory.from_json("replayed", path.read_text())
    replayer = worker_replayer()
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        await replayer.replay_workflow(history)
        times.append(time.perf_counter() - started)
    return times


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--steps", type=int, default=500)
@click.option("--runs", type=int, default=3)
@click.option("--json", type=Path)
@click.option("--replay-history", type=Path, hidden=True)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    if args.replay_history:
        print(json.dumps(await replay_history(args.replay_history, args.runs)))
        return 0
    rows = []
    async with embedded_dev_server() as env:
        task_queue = f"bench-{uuid.uuid4()}"
        async with build_worker(env.client, task_queue):
            for local in (False, True):
                rows.append(await measure(env.client, task_queue, args.steps, args.runs, local))
    print("| tool | steps | runs in the chain | events | longest run | its replay: cold, median |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['tool']} | {row['steps']} | {row['runs_in_chain']} | {row['events']} "
            f"| {row['longest_run_events']} events | {row['cold_seconds']:.2f} s, "
            f"{row['median']:.2f} s |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    # Without the SDK's teardown, which can abort at exit after a Replayer or a dev server.
    exit_now(asyncio.run(main()))
