"""What a guardrail that passes adds to a run's wall time, side by side with no guardrail.

    python bench/guardrails.py [--model-seconds 0.2] [--guard-seconds 0.05] [--runs 5]
                               [--json FILE]

Runs real AgentWorkflow runs (embedded dev server, in-process worker, scripted model, the demo's
SQLite tools) of one workload, a lookup and an answer (2 model calls, 1 tool call), five ways:
with no guardrail; with an input guardrail beside the first model call (the default); with it
blocking (awaited before the model is called); with an output guardrail on the answer; with a
tool-result guardrail on the lookup. Each guardrail is an activity that sleeps
`--guard-seconds` and passes. `--model-seconds` is the scripted model's latency a call. Each
way runs `--runs` times, in turn with the others; the table has each way's median wall time and
what it adds to the median of the runs with no guardrail.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.client import Client

from durable_agent.activities.guardrails import GuardrailContext, guardrail
from durable_agent.serving.command_line import Command, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.guardrail_data import GuardrailPolicy, GuardrailRef, GuardrailVerdict
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn

WAYS = ("none", "input, beside the call", "input, blocking", "output", "tool result")
GUARD = SimpleNamespace(seconds=0.05)
"""How long the bench's guardrail takes to pass."""


@guardrail(name="bench_pass")
async def bench_pass(text: str, context: GuardrailContext) -> GuardrailVerdict:
    await asyncio.sleep(GUARD.seconds)
    return GuardrailVerdict(tripped=False)


def policy(way: str) -> GuardrailPolicy | None:
    return {
        "none": None,
        "input, beside the call": GuardrailPolicy(input=["bench_pass"]),
        "input, blocking": GuardrailPolicy(input=[GuardrailRef(name="bench_pass", blocking=True)]),
        "output": GuardrailPolicy(output=["bench_pass"]),
        "tool result": GuardrailPolicy(tool_results=["bench_pass"]),
    }[way]


async def measure(client: Client, way: str, delay: float) -> float:
    task_queue = f"bench-{uuid.uuid4()}"
    lookup = ScriptedCall(name="get_order", arguments={"order_id": 1042})
    agent_input = AgentInput(
        prompt="Where is order 1042?",
        tools=["get_order"],
        model=ModelSettings(
            provider="scripted",
            model="bench",
            script=[
                ScriptedTurn(calls=[lookup], delay_seconds=delay),
                ScriptedTurn(text="It is on its way.", delay_seconds=delay),
            ],
        ),
        guardrails=policy(way),
    )
    async with build_worker(client, task_queue):
        started = time.perf_counter()
        await client.execute_workflow(
            AgentWorkflow.run, agent_input, id=f"bench-guard-{uuid.uuid4()}", task_queue=task_queue
        )
        return time.perf_counter() - started


def table(rows: list[dict[str, Any]], delay: float) -> str:
    base = next(row["wall_seconds"] for row in rows if row["way"] == "none")
    lines = [
        f"| guardrail (model {delay:g} s a call, guard {GUARD.seconds:g} s) | median wall, s "
        "| added | added, % |",
        "|---|---:|---:|---:|",
    ]
    for row in rows:
        wall = row["wall_seconds"]
        added = wall - base
        lines.append(f"| {row['way']} | {wall:.3f} | {added:+.3f} | {100 * added / base:+.1f}% |")
    return "\n".join(lines)


@click.command(cls=Command, help=__doc__.split("\n")[0])
@click.option("--model-seconds", type=click.FloatRange(0, 60), default=0.2, help="model latency")
@click.option("--guard-seconds", type=click.FloatRange(0, 60), default=0.05, help="guard latency")
@click.option("--runs", type=click.IntRange(1, 100), default=5, help="runs of each way")
@click.option("--json", type=Path, help="also write the rows here")
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    GUARD.seconds = args.guard_seconds
    walls: dict[str, list[float]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_DEMO_DB"] = str(Path(scratch) / "bench.db")
        async with embedded_dev_server() as env:
            await measure(env.client, "none", 0)  # warm: the first run pays for imports
            for _ in range(args.runs):
                for way in WAYS:
                    walls[way].append(await measure(env.client, way, args.model_seconds))
    rows = [
        {"way": way, "wall_seconds": round(statistics.median(w), 4), "runs": w}
        for way, w in walls.items()
    ]
    print(table(rows, args.model_seconds))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
