"""Streaming's cost to the history: events and bytes of a run with streaming off and on.

    python bench/streaming.py [--steps 5] [--text-chars 2000] [--pace-ms 2] [--json FILE]

Runs real AgentWorkflow runs (embedded dev server, in-process worker) against the local fake of
Anthropic's Messages API (tests/fake_anthropic.py) through the real SDK, with thinking on: each
step thinks, writes `--text-chars` characters and calls one tool, the last one answers. The fake
sends its server-sent events `--pace-ms` apart, so a step's text takes a while to write, as a
model's does. Each run is followed by `AgentRun.deltas()` (describe every 100 ms).

It reports, per run and per step: history events and bytes (the events' protobuf size, what
the server stores), the deltas the reader got, and what a signal per delta batch would have
added (one WorkflowExecutionSignaled event per batch, of the size measured for the run's own
signals-sized payload). Streaming's progress rides on the model activity's heartbeats, which the
history does not record: the target is no more events, and the same bytes.
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
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from durable_agent.client.agent_client import AgentRun
from durable_agent.serving.command_line import Command, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.activity_io import ModelDelta, StreamProgress
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings
from tests import fake_anthropic

TOOL = "get_order"


def script(steps: int, text_chars: int, pace_seconds: float) -> list[fake_anthropic.Reply]:
    text = ("The order is being looked up; " * (text_chars // 30 + 1))[:text_chars]
    replies = [
        fake_anthropic.Reply(
            f"{text} ({step})",
            thinking=f"Step {step}: look the order up again.",
            tool_uses=[(f"toolu_{step}", TOOL, {"order_id": 1042 + step})],
            pace_seconds=pace_seconds,
        )
        for step in range(1, steps)
    ]
    replies.append(
        fake_anthropic.Reply(f"{text} (done)", thinking="Answer.", pace_seconds=pace_seconds)
    )
    return replies


async def measure(
    client: Client, steps: int, text_chars: int, pace_seconds: float, stream: bool
) -> dict[str, Any]:
    task_queue = f"bench-{uuid.uuid4()}"
    with fake_anthropic.FakeAnthropic(script(steps, text_chars, pace_seconds)) as fake:
        os.environ["ANTHROPIC_API_KEY"] = fake.api_key
        os.environ["ANTHROPIC_BASE_URL"] = fake.base_url
        agent_input = AgentInput(
            prompt="Look order 1042 up, again and again.",
            tools=[TOOL],
            model=ModelSettings(
                provider="anthropic",
                model="claude-fake-sonnet",
                thinking_budget_tokens=1024,
                stream=stream,
            ),
            limits=Limits(max_steps=steps),
        )
        async with build_worker(client, task_queue):
            started = time.monotonic()
            handle = await client.start_workflow(
                AgentWorkflow.run,
                agent_input,
                id=f"bench-streaming-{uuid.uuid4().hex[:8]}",
                task_queue=task_queue,
            )
            agent_run = AgentRun(handle, client)
            deltas: list[ModelDelta] = [d async for d in agent_run.deltas()]
            result = await handle.result()
            seconds = time.monotonic() - started
    events = [event async for event in handle.fetch_history_events()]
    size = sum(event.ByteSize() for event in events)
    signals = [
        e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
    ]
    # What one delta batch would weigh as a signal: a signal event carrying a StreamProgress of a
    # batch's size (the text of 100 ms), as the progress stream's retry signals are sent.
    batch_chars = max(
        len("".join(d.text for d in deltas if d.kind == "text")) // max(len(deltas), 1), 1
    )
    payload = StreamProgress(step=1, attempt=1, text="x" * batch_chars).model_dump_json()
    signal_bytes = (
        min(e.ByteSize() for e in signals) + len(payload) if signals else 200 + len(payload)
    )
    return {
        "stream": stream,
        "steps": result.steps,
        "text_chars_per_step": text_chars,
        "events": len(events),
        "history_bytes": size,
        "events_per_step": round(len(events) / result.steps, 1),
        "bytes_per_step": round(size / result.steps),
        "deltas_read": len([d for d in deltas if d.kind != "void"]),
        "characters_read": sum(len(d.text) for d in deltas if d.kind == "text"),
        "signal_per_delta_events_per_step": round(len(deltas) / result.steps, 1),
        "signal_per_delta_bytes_per_step": round(len(deltas) * signal_bytes / result.steps),
        "seconds": round(seconds, 2),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| streaming | steps | events | history bytes | events/step | bytes/step | deltas read "
        "| a signal per delta would add, events/step | bytes/step |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        extra_events = r["signal_per_delta_events_per_step"] if r["stream"] else "-"
        extra_bytes = f"{r['signal_per_delta_bytes_per_step']:,}" if r["stream"] else "-"
        lines.append(
            f"| {'on' if r['stream'] else 'off'} | {r['steps']} | {r['events']} "
            f"| {r['history_bytes']:,} | {r['events_per_step']} | {r['bytes_per_step']:,} "
            f"| {r['deltas_read']} | {extra_events} | {extra_bytes} |"
        )
    return "\n".join(lines)


@click.command(cls=Command, help=__doc__.split("\n\n")[0])
@click.option("--steps", type=int, default=5)
@click.option("--text-chars", type=int, default=2000)
@click.option("--pace-ms", type=float, default=2.0)
@click.option("--json", type=Path)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main() -> None:
    args = parse(command_line)
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.setdefault("AGENT_DEMO_DB", str(Path(scratch) / "demo.db"))
        async with embedded_dev_server() as env:
            rows = [
                await measure(env.client, args.steps, args.text_chars, args.pace_ms / 1000, stream)
                for stream in (False, True)
            ]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
