"""Tokens against steps: the seeds' quadratic, and what a byte-stable prefix lets the cache serve.

    python bench/tokens.py [--steps 5 10 20] [--model gpt-4o-mini] [--json FILE]

Runs real AgentWorkflow runs (embedded dev server, in-process worker, scripted model, the demo's
SQLite tools) of K steps each. Every step sends the whole transcript again, so a K-step run's total
input grows as K squared. For each model call, the request body the OpenAI adapter would send is
rebuilt and compared byte for byte with the previous call's: the shared prefix is what OpenAI's
automatic prompt cache can serve (at least 1,024 tokens, in steps of 128). Token counts are
estimates (4 characters a token), the same for every row, so the ratios are what matter.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.client import Client

from durable_agent.activities import pricing
from durable_agent.activities.providers.openai_provider import request_params
from durable_agent.activities.providers.scripted import recorded_requests, requests_recorded
from durable_agent.serving.command_line import Command, Several, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ModelRequest
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.usage import Usage

CHARS_PER_TOKEN = 4
CACHE_MIN_TOKENS = 1024
CACHE_INCREMENT = 128


def script(steps: int) -> list[ScriptedTurn]:
    """steps-1 replies that each look up a different bulk order, then the answer."""
    turns = []
    for i in range(steps - 1):
        tool = "get_order" if i % 2 == 0 else "get_tracking"
        turns.append(
            ScriptedTurn(
                text=f"Checking order {100000 + i}.",
                calls=[ScriptedCall(name=tool, arguments={"order_id": 100000 + i})],
            )
        )
    turns.append(ScriptedTurn(text="Done: every order checked."))
    return turns


def prompt_bytes(request: ModelRequest, clock_in_system: bool = False) -> bytes:
    """The prompt in the order the provider reads it: tools, then the messages.

    With `clock_in_system`, the system prompt carries the time of the call, as a prompt that
    says "Current time: ..." does: the mistake that a stable prefix avoids.
    """
    if clock_in_system:
        stamp = f"Current time: 2026-11-29T12:{request.step:02d}:00Z. "
        request = request.model_copy(update={"system": stamp + (request.system or "")})
    params = request_params(request)
    return json.dumps([params.get("tools", []), params["messages"]]).encode()


def cacheable_tokens(previous: bytes | None, current: bytes) -> int:
    if previous is None:
        return 0
    shared = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        shared += 1
    tokens = shared // CHARS_PER_TOKEN
    if tokens < CACHE_MIN_TOKENS:
        return 0
    return CACHE_MIN_TOKENS + (tokens - CACHE_MIN_TOKENS) // CACHE_INCREMENT * CACHE_INCREMENT


async def measure(client: Client, steps: int, model: str) -> dict[str, Any]:
    task_queue = f"bench-{uuid.uuid4()}"
    workflow_id = f"bench-tokens-{steps}-{uuid.uuid4().hex[:6]}"
    with requests_recorded():
        async with build_worker(client, task_queue):
            result = await client.execute_workflow(
                AgentWorkflow.run,
                AgentInput(
                    prompt="Check the bulk customer's recent orders one by one.",
                    system="You are a support agent.",
                    tools=["get_order", "get_tracking"],
                    model=ModelSettings(provider="scripted", model=model, script=script(steps)),
                    limits=Limits(max_steps=max(steps, 1)),
                ),
                id=workflow_id,
                task_queue=task_queue,
            )
        requests = recorded_requests(workflow_id)
    assert len(requests) == steps == result.steps
    price = pricing.price_for(model)
    previous: bytes | None = None
    previous_clocked: bytes | None = None
    total = cached = cached_clocked = 0
    cost_uncached = cost_cached = 0.0
    for request in requests:
        body = prompt_bytes(request)
        tokens = len(body) // CHARS_PER_TOKEN
        hit = cacheable_tokens(previous, body)
        total += tokens
        cached += hit
        cost_uncached += pricing.cost_usd(Usage(input_tokens=tokens), price) or 0.0
        cost_cached += (
            pricing.cost_usd(Usage(input_tokens=tokens, cached_input_tokens=hit), price) or 0.0
        )
        previous = body
        clocked = prompt_bytes(request, clock_in_system=True)
        cached_clocked += cacheable_tokens(previous_clocked, clocked)
        previous_clocked = clocked
    first = len(prompt_bytes(requests[0])) // CHARS_PER_TOKEN
    return {
        "steps": steps,
        "input_tokens": total,
        "first_call_tokens": first,
        "last_call_tokens": len(previous or b"") // CHARS_PER_TOKEN,
        "cached_tokens": cached,
        "cached_share": round(cached / total, 3),
        "cached_share_with_clock_in_system": round(cached_clocked / total, 3),
        "input_cost_usd_no_cache": round(cost_uncached, 6),
        "input_cost_usd_with_cache": round(cost_cached, 6),
    }


def table(rows: list[dict[str, Any]], model: str) -> str:
    base = rows[0]
    lines = [
        f"| steps | input tokens | x of {base['steps']} steps | last call | cache share "
        "| cache share, clock in system prompt "
        f"| input cost, no cache ({model}) | with cache |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['steps']} | {row['input_tokens']:,} "
            f"| {row['input_tokens'] / base['input_tokens']:.1f} "
            f"| {row['last_call_tokens']:,} | {row['cached_share']:.0%} "
            f"| {row['cached_share_with_clock_in_system']:.0%} "
            f"| ${row['input_cost_usd_no_cache']:.5f} | ${row['input_cost_usd_with_cache']:.5f} |"
        )
    return "\n".join(lines)


@click.command(cls=Command, help=__doc__.split("\n")[0])
@click.option("--steps", type=int, default=[5, 10, 20], metavar="N ...", cls=Several)
@click.option("--model", default="gpt-4o-mini", help="whose prices to apply")
@click.option("--json", type=Path, help="also write the rows here")
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_DEMO_DB"] = str(Path(scratch) / "bench.db")
        async with embedded_dev_server() as env:
            rows = [await measure(env.client, steps, args.model) for steps in args.steps]
    print(table(rows, args.model))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
