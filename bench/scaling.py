"""Throughput from one worker process to two, on this machine.

    python bench/scaling.py [--runs 200] [--steps 10] [--delay 0.2] [--json FILE]

One embedded dev server. For 1 and then 2 worker processes (`worker.py --tools bench.workload`,
as a deployment starts them, sharing one SQLite message store), `--runs` concurrent runs of the
suite's workload (bench/workload.py: a lookup a step, the scripted model taking `--delay` s a
call). Reports the batch's wall time, and the CPU seconds of the worker processes and of the dev
server, read from /proc. A worker process runs its workflow tasks one at a time (the GIL), so a
second process is how a host uses a second core; on a 2-core machine the dev server competes for
the same cores.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.client import Client

from bench import workload
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server

REPO = Path(__file__).resolve().parent.parent


def cpu_of(pid: int) -> float:
    """A process's user and system CPU seconds so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_of_self() -> set[int]:
    pids: set[int] = set()
    for listing in Path("/proc/self/task").glob("*/children"):
        pids.update(int(pid) for pid in listing.read_text().split())
    return pids


def start_worker_processes(
    address: str,
    queue: str,
    processes: int,
    env: dict[str, str],
    command: Sequence[str] = ("worker.py", "--tools", "bench.workload"),
) -> list[subprocess.Popen[bytes]]:
    """`processes` workers as a deployment starts them: `python COMMAND --address ADDRESS
    --task-queue QUEUE`, the agent's (`worker.py --tools bench.workload`) by default."""
    return [
        subprocess.Popen(
            [sys.executable, *command, "--address", address, "--task-queue", queue],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]


def stop_worker_processes(workers: list[subprocess.Popen[bytes]]) -> None:
    for process in workers:
        process.terminate()
    for process in workers:
        process.wait(timeout=60)


async def measure(
    client: Client, address: str, processes: int, args: SimpleNamespace, scratch: Path
) -> dict[str, Any]:
    queue = f"bench-scaling-{processes}-{uuid.uuid4().hex[:8]}"
    server_pids = children_of_self()
    env = {
        **os.environ,
        "AGENT_MESSAGE_STORE": str(scratch / "messages.db"),
        "AGENT_RESULT_STORE": str(scratch / "results.db"),
        "AGENT_DEMO_DB": str(scratch / "demo.db"),
    }
    workers = start_worker_processes(address, queue, processes, env)
    try:
        # Warm every process up: a few runs, so each has polled and imported everything.
        await asyncio.gather(*(workload.run_agent(client, queue, 1) for _ in range(4 * processes)))
        worker_before = sum(cpu_of(w.pid) for w in workers)
        server_before = sum(cpu_of(pid) for pid in server_pids)
        started = time.perf_counter()
        await asyncio.gather(
            *(workload.run_agent(client, queue, args.steps, args.delay) for _ in range(args.runs))
        )
        seconds = time.perf_counter() - started
        worker_cpu = sum(cpu_of(w.pid) for w in workers) - worker_before
        server_cpu = sum(cpu_of(pid) for pid in server_pids) - server_before
    finally:
        stop_worker_processes(workers)
    return {
        "worker_processes": processes,
        "runs": args.runs,
        "steps": args.steps,
        "seconds": round(seconds, 2),
        "worker_cpu_seconds": round(worker_cpu, 1),
        "server_cpu_seconds": round(server_cpu, 1),
        "runs_per_second": round(args.runs / seconds, 2),
    }


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--runs", type=int, default=200)
@click.option("--steps", type=int, default=10)
@click.option("--delay", type=float, default=0.2)
@click.option("--json", type=Path)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        async with embedded_dev_server() as env:
            address = env.client.service_client.config.target_host
            for processes in (1, 2):
                rows.append(await measure(env.client, address, processes, args, Path(scratch)))
    one = rows[0]["seconds"]
    print(f"{args.runs} concurrent {args.steps}-step runs, model {1000 * args.delay:.0f} ms a call")
    print(
        "| worker processes | wall time | runs a second | speed-up | worker CPU | dev-server CPU |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['worker_processes']} | {row['seconds']} s | {row['runs_per_second']} "
            f"| {one / row['seconds']:.2f}x | {row['worker_cpu_seconds']} s "
            f"| {row['server_cpu_seconds']} s |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    exit_now(asyncio.run(main()))
