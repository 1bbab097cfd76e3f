"""A 500-step run with large tool results, end to end: does it finish, and how does it grow?

    python bench/long_run.py [--steps 500] [--result-chars 9000] [--max-context-tokens 40000]

One real AgentWorkflow run (embedded dev server, in-process worker, scripted model): every step
reads a result larger than its 8,000-character bound (so it is externalised), the context is kept
under a limit by window compaction, the history grows by reference (linear history), and the
run continues as new whenever Temporal suggests it. Every request the model received is checked
against the pairing rule.
"""

from __future__ import annotations

import asyncio
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

import tests.tools_for_tests  # noqa: F401  (registers `blob`)
from durable_agent.activities.providers.scripted import recorded_requests, requests_recorded
from durable_agent.serving.command_line import Command, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn
from durable_agent.workflows.transcript import Transcript


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--steps", type=int, default=500)
@click.option("--result-chars", type=int, default=9000)
@click.option("--max-context-tokens", type=int, default=40000)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    turns = [
        ScriptedTurn(calls=[ScriptedCall(name="blob", arguments={"size": args.result_chars + i})])
        for i in range(args.steps - 1)
    ]
    agent_input = AgentInput(
        prompt="Read every part.",
        tools=["blob"],
        model=ModelSettings(script=[*turns, ScriptedTurn(text="done")]),
        limits=Limits(max_steps=args.steps, max_context_tokens=args.max_context_tokens),
        compaction="window",
    )
    with tempfile.TemporaryDirectory() as scratch, requests_recorded():
        os.environ["AGENT_MESSAGE_STORE"] = str(Path(scratch) / "messages.db")
        os.environ["AGENT_RESULT_STORE"] = str(Path(scratch) / "results.db")
        async with embedded_dev_server() as env, build_worker(env.client, "long-run"):
            workflow_id = f"long-run-{uuid.uuid4().hex[:8]}"
            started = time.monotonic()
            result = await env.client.execute_workflow(
                AgentWorkflow.run, agent_input, id=workflow_id, task_queue="long-run"
            )
            seconds = time.monotonic() - started
            runs = [r async for r in env.client.list_workflows(f"WorkflowId='{workflow_id}'")]
            events = 0
            size = 0
            for run in runs:
                history = await env.client.get_workflow_handle(
                    workflow_id, run_id=run.run_id
                ).fetch_history()
                events += len(history.events)
                size += sum(event.ByteSize() for event in history.events)
        requests = recorded_requests(workflow_id)
    for request in requests:
        Transcript(messages=request.messages)  # raises on an invalid transcript
    largest = max(len(r.messages) for r in requests)
    externalised = sum(c.externalised for s in result.step_records for c in s.tool_calls)
    print(f"steps: {result.steps} ({result.answer!r}) in {seconds:.0f} s")
    print(f"runs (continue-as-new chain): {len(runs)}; events: {events}; history: {size:,} B")
    print(f"compactions: {len(result.compactions)}; externalised results: {externalised}")
    print(f"requests checked against the pairing rule: {len(requests)}, all valid;")
    print(f"largest request: {largest} messages")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
