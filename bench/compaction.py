"""Compaction against none: what each compaction saves in tokens, and what it costs in prefix cache.

    python bench/compaction.py [--steps 40] [--max-context-tokens N] [--model gpt-4o-mini]
                               [--json FILE] [--quick]

Seed 000: a compaction that saves tokens can cost more than it saves, because it rewrites the
prompt from the point of the edit and so invalidates the provider's prefix cache from there on.
This runs the same long scripted run (`--steps`, 40 by default, 16 with `--quick`) on an embedded
dev server (in-process worker, scripted model) with `compaction="none"`, `"window"` and
`"summary"`, and the two late variants below. Every step but the last reads a ~1,500-character
tool result (`blob`, with distinct arguments), then the model answers.

The compacting runs get `limits.max_context_tokens` (default: 150 tokens a step, so compaction
happens a few times at any length). The run with no compaction gets no context limit at all, or
it would fail at that limit: it sends more than the limit allows, and is there only as the cost
baseline. Two more runs, "window, late" and "summary, late", get a limit between the sizes of
the no-compaction run's last two calls, so that they compact once, just before the final call:
the tokens are saved on one call only, and the cache is lost all the same.

Every figure comes from the requests the scripted model received (`recorded_requests`, summary
calls included, resolved in full). For each, the request body the OpenAI adapter would send is
rebuilt (`request_params`) and compared byte for byte with the previous request *of the same
purpose*: step calls with the previous step call, summary calls with the previous summary call
(a summary does not share the steps' prefix). As in bench/tokens.py, tokens are estimated at 4
characters a token and the shared prefix is what OpenAI's automatic cache could serve: at least
1,024 tokens, in steps of 128.

Columns:

- **policy**: `AgentInput.compaction` ("late": the single late compaction above).
- **context limit**: `limits.max_context_tokens` of the run ("none": no limit).
- **calls**: step calls + summary calls (a summary is not a step, but it is paid for).
- **compactions**: entries in the run's `result.compactions`.
- **tokens removed**: the sum of their `tokens_removed`: the estimated tokens the *next* call was
  spared by each compaction (the workflow's own estimate, note deducted). Each later call until
  the next compaction is spared them again, which the input total below includes.
- **cache lost (result)**: the sum of the result's `cached_tokens_lost`: the previous call's input
  minus what the call after the compaction read from cache, as the provider reported it. The
  scripted model reports no cache reads, so here it is the previous call's whole input.
- **cache lost (sim.)**: the same trade under the simulated cache: for the first step call after
  each compaction, what the cache would have served had the transcript only grown (the previous
  request's whole body) minus what it does serve of the compacted request.
- **input tokens**: every request's estimated input tokens, summary calls included.
- **vs none**: input tokens as a share of the no-compaction run's.
- **largest call**: the estimated tokens of the largest single request.
- **cached (sim.)**: input tokens the simulated prefix cache serves, and their share of the input.
- **cost, no cache / with cache**: US dollars at `--model`'s prices (activities/pricing.py): the
  estimated input tokens, all at the input price or the cached ones at the cached-input price,
  plus the run's output tokens (`result.usage`, summaries included; the scripted model's estimate).
  Only OpenAI's cache is simulated: with a model priced for cache writes (Anthropic), writes are
  not charged, which flatters compaction most, since it rewrites everything after its edit.
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

import tests.tools_for_tests  # noqa: F401  (registers `blob`)
from bench.tokens import CHARS_PER_TOKEN, cacheable_tokens, prompt_bytes
from durable_agent.activities import pricing
from durable_agent.activities.providers.scripted import recorded_requests, requests_recorded
from durable_agent.serving.command_line import Command, parse, refuse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.usage import Usage

POLICIES = ("none", "window", "summary")
RESULT_CHARS = 1500
TOKENS_PER_STEP_OF_LIMIT = 150


def script(steps: int) -> list[ScriptedTurn]:
    """steps-1 replies that each read a different part, then the answer."""
    turns = [
        ScriptedTurn(
            text=f"Reading part {i}.",
            calls=[ScriptedCall(name="blob", arguments={"size": RESULT_CHARS + i})],
        )
        for i in range(steps - 1)
    ]
    turns.append(ScriptedTurn(text="Done: every part read."))
    return turns


def default_limit(steps: int) -> int:
    return max(TOKENS_PER_STEP_OF_LIMIT * steps // 100 * 100, 1500)


def agent_input(policy: str, steps: int, model: str, limit: int | None) -> AgentInput:
    return AgentInput(
        prompt="Read every part of the report, one at a time, and say when you are done.",
        system="You are a careful reader.",
        tools=["blob"],
        model=ModelSettings(provider="scripted", model=model, script=script(steps)),
        limits=Limits(max_steps=steps, max_context_tokens=limit),
        compaction=policy,
    )


def tokens_of(body: bytes) -> int:
    return len(body) // CHARS_PER_TOKEN


async def measure(
    client: Client, label: str, policy: str, steps: int, model: str, limit: int | None
) -> dict[str, Any]:
    task_queue = f"bench-{uuid.uuid4()}"
    workflow_id = f"bench-compaction-{policy}-{steps}-{uuid.uuid4().hex[:6]}"
    with requests_recorded():
        async with build_worker(client, task_queue):
            result = await client.execute_workflow(
                AgentWorkflow.run,
                agent_input(policy, steps, model, limit),
                id=workflow_id,
                task_queue=task_queue,
            )
        requests = recorded_requests(workflow_id)
    step_requests = [r for r in requests if r.purpose == "step"]
    summary_requests = [r for r in requests if r.purpose == "summary"]
    assert len(step_requests) == steps == result.steps, (len(step_requests), result.steps)
    if policy == "summary":
        assert len(summary_requests) == len(result.compactions)

    price = pricing.price_for(model)
    if price is None:
        raise SystemExit(f"no price for model {model!r}: see activities/pricing.py")
    previous: dict[str, bytes | None] = {"step": None, "summary": None}
    bodies: dict[int, bytes] = {}
    total = cached = largest = 0
    cost_uncached = cost_cached = 0.0
    for request in requests:
        body = prompt_bytes(request)
        tokens = tokens_of(body)
        hit = cacheable_tokens(previous[request.purpose], body)
        previous[request.purpose] = body
        if request.purpose == "step":
            bodies[request.step] = body
        total += tokens
        cached += hit
        largest = max(largest, tokens)
        cost_uncached += pricing.cost_usd(Usage(input_tokens=tokens), price) or 0.0
        cost_cached += (
            pricing.cost_usd(Usage(input_tokens=tokens, cached_input_tokens=hit), price) or 0.0
        )
    output_cost = pricing.cost_usd(Usage(output_tokens=result.usage.output_tokens), price) or 0.0

    compactions = []
    for record in result.compactions:
        before, after = bodies[record.step - 1], bodies[record.step]
        # Had the transcript only grown, the next body would share all of the previous one but
        # its closing "]]": that is what the cache would have served.
        would_serve = cacheable_tokens(before, before[:-2])
        serves = cacheable_tokens(before, after)
        compactions.append(
            {
                "step": record.step,
                "messages_removed": record.messages_removed,
                "tokens_removed": record.tokens_removed,
                "cached_tokens_lost": record.cached_tokens_lost,
                "simulated_cached_tokens_lost": would_serve - serves,
                "tokens_before": tokens_of(before),
                "tokens_after": tokens_of(after),
            }
        )
    return {
        "label": label,
        "policy": policy,
        "steps": steps,
        "max_context_tokens": limit,
        "step_calls": len(step_requests),
        "summary_calls": len(summary_requests),
        "compactions": len(compactions),
        "tokens_removed": sum(c["tokens_removed"] for c in compactions),
        "cached_tokens_lost": sum(c["cached_tokens_lost"] or 0 for c in compactions),
        "simulated_cached_tokens_lost": sum(c["simulated_cached_tokens_lost"] for c in compactions),
        "input_tokens": total,
        "summary_input_tokens": sum(tokens_of(prompt_bytes(r)) for r in summary_requests),
        "largest_call_tokens": largest,
        "cached_tokens": cached,
        "cached_share": round(cached / total, 3),
        "output_tokens": result.usage.output_tokens,
        "cost_usd_no_cache": round(cost_uncached + output_cost, 6),
        "cost_usd_with_cache": round(cost_cached + output_cost, 6),
        "compaction_records": compactions,
        # The workflow's own estimate of each step call's input (what its context limit reads).
        "step_input_tokens": [r.usage.input_tokens for r in result.step_records],
    }


def table(rows: list[dict[str, Any]], model: str) -> str:
    base = next(row for row in rows if row["label"] == "none")
    lines = [
        "| policy | context limit | calls (steps + summaries) | compactions | tokens removed "
        "| cache lost (result) | cache lost (sim.) | input tokens | vs none | largest call "
        f"| cached (sim.) | cost, no cache ({model}) | cost, with cache |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        limit = row["max_context_tokens"]
        lines.append(
            f"| {row['label']} | {'none' if limit is None else f'{limit:,}'} "
            f"| {row['step_calls']} + {row['summary_calls']} | {row['compactions']} "
            f"| {row['tokens_removed']:,} | {row['cached_tokens_lost']:,} "
            f"| {row['simulated_cached_tokens_lost']:,} | {row['input_tokens']:,} "
            f"| {row['input_tokens'] / base['input_tokens']:.0%} "
            f"| {row['largest_call_tokens']:,} "
            f"| {row['cached_tokens']:,} ({row['cached_share']:.0%}) "
            f"| ${row['cost_usd_no_cache']:.6f} | ${row['cost_usd_with_cache']:.6f} |"
        )
    return "\n".join(lines)


@click.command(cls=Command, help=__doc__.split("\n")[0])
@click.option("--steps", type=int, default=40, help="model calls per run")
@click.option(
    "--max-context-tokens",
    type=int,
    help=f"the compacting runs' context limit (default: {TOKENS_PER_STEP_OF_LIMIT} a step)",
)
@click.option("--model", default="gpt-4o-mini", help="whose prices to apply")
@click.option("--json", type=Path, help="also write the rows here")
@click.option("--quick", is_flag=True, help="16 steps")
def command_line(**options: Any) -> SimpleNamespace:
    args = SimpleNamespace(**options)
    args.steps = 16 if args.quick else args.steps
    if args.steps < 2:
        refuse("--steps must be at least 2")
    return args


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    steps = args.steps
    limit = args.max_context_tokens or default_limit(steps)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_DEMO_DB"] = str(Path(scratch) / "bench.db")
        os.environ.setdefault("AGENT_RESULT_STORE", str(Path(scratch) / "results.db"))
        os.environ.setdefault("AGENT_MESSAGE_STORE", str(Path(scratch) / "messages.db"))
        async with embedded_dev_server() as env:
            none = await measure(env.client, "none", "none", steps, args.model, None)
            rows = [none]
            for policy in POLICIES[1:]:
                rows.append(await measure(env.client, policy, policy, steps, args.model, limit))
            # Between the last two calls: one compaction, before the final call.
            *_, before_last, last = none["step_input_tokens"]
            late = (before_last + last) // 2
            for policy in POLICIES[1:]:
                label = f"{policy}, late"
                rows.append(await measure(env.client, label, policy, steps, args.model, late))
    print(
        f"{steps} steps, each reading a ~{RESULT_CHARS:,}-character result. The run without "
        "compaction has no context limit (with one it would fail at it): it is the cost baseline."
    )
    print()
    print(table(rows, args.model))
    print()
    for row in rows[1:]:
        steps_list = ", ".join(str(c["step"]) for c in row["compaction_records"]) or "-"
        print(f"- {row['label']}: compactions before steps {steps_list}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
