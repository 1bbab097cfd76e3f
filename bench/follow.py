"""What following a run costs the run: its history, unfollowed and followed two ways.

    python bench/follow.py [--steps 30] [--reply-chars 2000] [--runs 3] [--json FILE]

Runs real AgentWorkflow runs (embedded dev server, in-process worker, scripted model whose every
reply carries `--reply-chars` characters of text and a tool call) three ways:

- **not followed**: started, then only its result awaited (as `starter.py --no-wait` leaves it);
- **followed by query**: `AgentRun.events()`, as `starter.py`, `watch` and app code follow a run;
- **followed by update**: the stream's own `WorkflowStreamClient.subscribe` with its 100 ms
  cooldown, which long-polls with an update (how `AgentRun.events()` followed a run before).

For each it reports the history's events and bytes (protobuf, every run of the chain) and, for
the followers, how late each event arrived after the run published it (its `at`), median and
95th percentile. How many workflow tasks a run takes depends on timing, so each way runs
`--runs` times and the table shows the median.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStreamClient

import tests.tools_for_tests  # noqa: F401  (registers `blob`)
from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.command_line import Command, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.events import EVENTS_TOPIC, AgentEvent
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn

WAYS = ("not followed", "followed by query", "followed by update")
UPDATE_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
}
"""What an update writes to a run's history (a poll of the update-based subscriber)."""


def agent_input(steps: int, reply_chars: int) -> AgentInput:
    turns = [
        ScriptedTurn(
            text=f"Step {i}: " + "x" * reply_chars,
            calls=[ScriptedCall(name="blob", arguments={"size": 200 + i})],
        )
        for i in range(steps - 1)
    ]
    return AgentInput(
        prompt="Read every part.",
        tools=["blob"],
        model=ModelSettings(script=[*turns, ScriptedTurn(text="done")]),
        limits=Limits(max_steps=steps),
    )


async def follow(client: Client, agent_run: AgentRun, way: str) -> list[float]:
    """Follow the run to its end; how late each event came, in seconds."""
    lags: list[float] = []
    if way == "followed by query":
        async for item in agent_run.events():
            lags.append((datetime.now(UTC) - item.data.at).total_seconds())
    elif way == "followed by update":
        stream = WorkflowStreamClient.create(client, agent_run.id)
        async for update_item in stream.subscribe(EVENTS_TOPIC, 0, result_type=AgentEvent):
            lags.append((datetime.now(UTC) - update_item.data.at).total_seconds())
    return lags


async def measure(client: Client, task_queue: str, args: SimpleNamespace, way: str) -> Any:
    handle = await client.start_workflow(
        AgentWorkflow.run,
        agent_input(args.steps, args.reply_chars),
        id=f"bench-follow-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )
    agent_run = AgentRun(handle, client)
    lags, _ = await asyncio.gather(follow(client, agent_run, way), handle.result())
    runs = [r async for r in client.list_workflows(f"WorkflowId='{handle.id}'")]
    histories = [
        await client.get_workflow_handle(handle.id, run_id=r.run_id).fetch_history() for r in runs
    ]
    events = [event for history in histories for event in history.events]
    return {
        "way": way,
        "events": len(events),
        "update_events": sum(1 for event in events if event.event_type in UPDATE_EVENTS),
        "history_bytes": sum(event.ByteSize() for event in events),
        "lag_median_ms": round(statistics.median(lags) * 1000) if lags else None,
        "lag_p95_ms": round(statistics.quantiles(lags, n=20)[-1] * 1000) if len(lags) > 1 else None,
    }


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"way": rows[0]["way"], "samples": len(rows)}
    for key in ("events", "update_events", "history_bytes", "lag_median_ms", "lag_p95_ms"):
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = round(statistics.median(values)) if values else None
    return out


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--steps", type=int, default=30)
@click.option("--reply-chars", type=int, default=2000)
@click.option("--runs", type=int, default=3)
@click.option("--json", type=Path)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    table: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_MESSAGE_STORE"] = str(Path(scratch) / "messages.db")
        os.environ["AGENT_RESULT_STORE"] = str(Path(scratch) / "results.db")
        async with embedded_dev_server() as env:
            task_queue = f"bench-{uuid.uuid4()}"
            async with build_worker(env.client, task_queue):
                for way in WAYS:
                    samples = [
                        await measure(env.client, task_queue, args, way) for _ in range(args.runs)
                    ]
                    table.append(median_row(samples))
    base = table[0]["history_bytes"]
    print(f"{args.steps} steps, {args.reply_chars}-character replies; medians of {args.runs} runs")
    print("| run | events | history | vs not followed | event lag median | p95 |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in table:
        lag = "-" if row["lag_median_ms"] is None else f"{row['lag_median_ms']} ms"
        p95 = "-" if row["lag_p95_ms"] is None else f"{row['lag_p95_ms']} ms"
        print(
            f"| {row['way']} | {row['events']} | {row['history_bytes']:,} B "
            f"| {row['history_bytes'] / base - 1:+.1%} | {lag} | {p95} |"
        )
    if args.json:
        args.json.write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    # Without the SDK's teardown, which can abort at exit after a Replayer or a dev server.
    exit_now(asyncio.run(main()))
