"""Code mode against plain tool calling: 20 lookups and a total, side by side.

    python bench/code_mode.py [--model-seconds 0.5] [--lookups 20] [--model gpt-4o-mini]
                              [--json FILE]

Runs real AgentWorkflow runs (embedded dev server, in-process worker, scripted model, the demo's
SQLite tools) of one workload three ways: plainly, one call a turn (as a model that looks up one
order a reply does: N + 1 model calls); plainly, all N calls in one reply (a model that fans
out); and in code mode, one script that gathers the N lookups and prints the total (2 model
calls). For each: model calls, input tokens (every request's tools and messages as the OpenAI
adapter sends them, 4 characters a token) and those OpenAI's prefix cache would serve (at least
1,024 tokens, in steps of 128), input cost at the model's prices with that cache, wall time,
the history's events and bytes, events a tool call, and the worker's CPU (this process, which
runs the worker and the client, and the sandbox processes code mode starts). `--model-seconds`
is the scripted model's latency a call, what a real model takes; 0 measures the loop alone.
"""

from __future__ import annotations

import asyncio
import json
import os
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

from bench.tokens import CHARS_PER_TOKEN, cacheable_tokens, prompt_bytes
from durable_agent.activities import pricing
from durable_agent.activities.providers.scripted import recorded_requests, requests_recorded
from durable_agent.serving.command_line import Command, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, CodeMode, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.usage import Usage

FIRST_ORDER = 100_000
PROMPT = "What do the bulk customer's orders {first} to {last} add up to? Look each one up."
WAYS = ("plain", "plain, one reply", "code mode")


def order_ids(lookups: int) -> list[int]:
    return list(range(FIRST_ORDER, FIRST_ORDER + lookups))


def lookup(order_id: int) -> ScriptedCall:
    return ScriptedCall(name="get_order", arguments={"order_id": order_id})


def script(way: str, lookups: int, delay: float) -> list[ScriptedTurn]:
    """The model's replies: the lookups (one a reply, all in one, or one script), then the
    answer, which each way reads from what it was given."""
    ids = order_ids(lookups)
    answer = ScriptedTurn(text="They add up to the total above.", delay_seconds=delay)
    if way == "plain":
        turns = [
            ScriptedTurn(text=f"Looking up {i}.", calls=[lookup(i)], delay_seconds=delay)
            for i in ids
        ]
        return [*turns, answer]
    if way == "plain, one reply":
        return [ScriptedTurn(calls=[lookup(i) for i in ids], delay_seconds=delay), answer]
    code = (
        "import asyncio\n"
        f"ids = list(range({ids[0]}, {ids[-1] + 1}))\n"
        "orders = await asyncio.gather(*(get_order(order_id=i) for i in ids))\n"
        'total = round(sum(order["total"]["amount"] for order in orders), 2)\n'
        'print(len(orders), "orders; total", total)\n'
    )
    run_code = ScriptedCall(name="run_code", arguments={"code": code})
    return [ScriptedTurn(calls=[run_code], delay_seconds=delay), answer]


def sandbox_cpu() -> float:
    """CPU seconds of this process's sandbox processes (monty's workers), read from /proc:
    they live as long as the pool, so no wait() adds them to this process's own."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for child in (task / "children").read_text().split():
            stat = Path(f"/proc/{child}/stat")
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                name = stat.read_text().split("(", 1)[1].rsplit(")", 1)[0]
            except OSError:
                continue
            if name == "monty":
                total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def measure(
    client: Client, way: str, lookups: int, delay: float, model: str
) -> dict[str, Any]:
    task_queue = f"bench-{uuid.uuid4()}"
    workflow_id = f"bench-code-mode-{uuid.uuid4().hex[:6]}"
    ids = order_ids(lookups)
    agent_input = AgentInput(
        prompt=PROMPT.format(first=ids[0], last=ids[-1]),
        system="You are a support agent.",
        tools=["get_order"],
        model=ModelSettings(provider="scripted", model=model, script=script(way, lookups, delay)),
        limits=Limits(max_steps=lookups + 2),
        code_mode=CodeMode() if way == "code mode" else None,
    )
    with requests_recorded():
        async with build_worker(client, task_queue):
            cpu, sandbox, started = time.process_time(), sandbox_cpu(), time.perf_counter()
            result = await client.execute_workflow(
                AgentWorkflow.run, agent_input, id=workflow_id, task_queue=task_queue
            )
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu + sandbox_cpu() - sandbox
        requests = recorded_requests(workflow_id)
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    price = pricing.price_for(model)
    total = cached = 0
    cost = 0.0
    previous: bytes | None = None
    for request in requests:
        body = prompt_bytes(request)
        tokens, hit = len(body) // CHARS_PER_TOKEN, cacheable_tokens(previous, body)
        total, cached, previous = total + tokens, cached + hit, body
        cost += pricing.cost_usd(Usage(input_tokens=tokens, cached_input_tokens=hit), price) or 0
    calls = sum(
        1
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
        and event.activity_task_scheduled_event_attributes.activity_type.name == "get_order"
    )
    events = len(history.events)
    return {
        "way": way,
        "lookups": lookups,
        "model_calls": result.steps,
        "tool_calls": calls,
        "input_tokens": total,
        "cached_tokens": cached,
        "input_cost_usd_with_cache": round(cost, 6),
        "wall_seconds": round(wall, 2),
        "history_events": events,
        "history_bytes": sum(event.ByteSize() for event in history.events),
        "events_per_tool_call": round(events / calls, 1) if calls else None,
        "worker_cpu_seconds": round(cpu, 3),
    }


def table(rows: list[dict[str, Any]], model: str, delay: float) -> str:
    """One column a way, one row a measure, and code mode's ratio against the plain run."""
    by_way = {row["way"]: row for row in rows}
    plain, code = by_way["plain"], by_way["code mode"]
    measures = [
        ("model calls", "model_calls", "{:,}"),
        ("tool calls", "tool_calls", "{:,}"),
        ("input tokens", "input_tokens", "{:,}"),
        ("of them cached (prefix cache)", "cached_tokens", "{:,}"),
        (f"input cost with the cache ({model})", "input_cost_usd_with_cache", "${:.5f}"),
        (f"wall time, s (model {delay:g} s a call)", "wall_seconds", "{:.2f}"),
        ("history events", "history_events", "{:,}"),
        ("history bytes", "history_bytes", "{:,}"),
        ("events a tool call", "events_per_tool_call", "{}"),
        ("worker CPU, s", "worker_cpu_seconds", "{:.3f}"),
    ]
    lines = [
        "| " + " | ".join(["", *WAYS, "plain / code mode"]) + " |",
        "|---|" + "---:|" * (len(WAYS) + 1),
    ]
    for label, key, shown in measures:
        cells = [shown.format(by_way[way][key]) for way in WAYS]
        ratio = plain[key] / code[key] if code[key] else 0
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio:.1f}x |")
    return "\n".join(lines)


@click.command(cls=Command, help=__doc__.split("\n")[0])
@click.option("--lookups", type=click.IntRange(1, 100), default=20, help="orders looked up")
@click.option(
    "--model-seconds", type=click.FloatRange(0, 60), default=0.5, help="the model's latency"
)
@click.option("--model", default="gpt-4o-mini", help="whose prices to apply")
@click.option("--json", type=Path, help="also write the rows here")
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_DEMO_DB"] = str(Path(scratch) / "bench.db")
        async with embedded_dev_server() as env:
            rows = [
                await measure(env.client, way, args.lookups, args.model_seconds, args.model)
                for way in WAYS
            ]
    print(table(rows, args.model, args.model_seconds))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
