"""History size against steps: does the event history grow linearly with the run?

    python bench/history.py [--steps 25 50 100] [--result-chars 2000] [--reply-chars 0]
                            [--json FILE]

Runs real AgentWorkflow runs (embedded dev server, in-process worker, scripted model) whose
every step calls a tool returning `--result-chars` characters (and whose every reply has
`--reply-chars` characters of text), once with linear history (model calls name what earlier
calls sent) and once without (each model call carries the transcript). It reports the size of
the whole event history (protobuf) against the size of the run's distinct messages (each message
counted once), with and without the scripted model's script, which a real run does not have.
The targets for 100 steps: at most 3x with 2 KB results; at most 2x with 2 KB replies as well.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

import tests.tools_for_tests  # noqa: F401  (registers `blob`)
from durable_agent.serving.command_line import Command, Several, exit_now, parse
from durable_agent.serving.dev_server import embedded_dev_server
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput, Limits
from durable_agent.workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn


def agent_input(steps: int, result_chars: int, linear: bool, reply_chars: int = 0) -> AgentInput:
    turns = [
        ScriptedTurn(
            text=f"Step {i}: " + "r" * reply_chars if reply_chars else None,
            calls=[ScriptedCall(name="blob", arguments={"size": result_chars + i})],
        )
        for i in range(steps - 1)
    ]
    return AgentInput(
        prompt="Read every part.",
        tools=["blob"],
        model=ModelSettings(script=[*turns, ScriptedTurn(text="done")]),
        limits=Limits(max_steps=steps),
        linear_history=linear,
    )


async def measure(
    client: Client, steps: int, result_chars: int, linear: bool, reply_chars: int = 0
) -> dict[str, Any]:
    task_queue = f"bench-{uuid.uuid4()}"
    async with build_worker(client, task_queue):
        handle = await client.start_workflow(
            AgentWorkflow.run,
            agent_input(steps, result_chars, linear, reply_chars),
            id=f"bench-history-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        with contextlib.suppress(WorkflowFailureError):
            await handle.result()
        transcript = await handle.query(AgentWorkflow.transcript)
        description = await handle.describe()
    # A run whose history grows too large continues as new: count every run of the chain.
    runs = [r async for r in client.list_workflows(f"WorkflowId='{handle.id}'")]
    histories = [
        await client.get_workflow_handle(handle.id, run_id=r.run_id).fetch_history() for r in runs
    ]
    events = [event for history in histories for event in history.events]
    distinct = sum(len(json.dumps(m.model_dump(mode="json"))) for m in transcript)
    # The scripted model's script is scaffolding a real run lacks: it is in the run's input and
    # in its first model call (later calls name it), so it is reported apart.
    script = agent_input(steps, result_chars, linear, reply_chars).model.script
    script_bytes = len(json.dumps([t.model_dump(mode="json") for t in script]))
    # What the server stores: the events' protobuf bytes (their JSON export is larger: payloads
    # are base64 in it).
    size = sum(event.ByteSize() for event in events)
    return {
        "steps": steps,
        "reply_chars": reply_chars,
        "linear_history": linear,
        "completed": description.status == WorkflowExecutionStatus.COMPLETED,
        "runs": len(runs),
        "events": len(events),
        "history_bytes": size,
        "distinct_message_bytes": distinct,
        "ratio": round(size / distinct, 2),
        "script_bytes": script_bytes,
        "ratio_without_script": round((size - 2 * script_bytes) / distinct, 2),
    }


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--steps", type=int, default=[25, 50, 100], metavar="N ...", cls=Several)
@click.option("--result-chars", type=int, default=2000)
@click.option("--reply-chars", type=int, default=0, help="text in each model reply (default: none)")
@click.option("--linear-only", is_flag=True, help="skip the runs carrying whole transcripts")
@click.option("--json", type=Path)
def command_line(**options: Any) -> SimpleNamespace:
    return SimpleNamespace(**options)


async def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["AGENT_MESSAGE_STORE"] = str(Path(scratch) / "messages.db")
        os.environ["AGENT_RESULT_STORE"] = str(Path(scratch) / "results.db")
        async with embedded_dev_server() as env:
            for steps in args.steps:
                for linear in (True,) if args.linear_only else (False, True):
                    rows.append(
                        await measure(
                            env.client, steps, args.result_chars, linear, args.reply_chars
                        )
                    )
    print(
        "| steps | model calls carry | runs | events | history | distinct messages | ratio "
        "| ratio without the script |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        carry = "new messages + a reference" if row["linear_history"] else "the whole transcript"
        runs = f"{row['runs']}" + ("" if row["completed"] else " (FAILED)")
        print(
            f"| {row['steps']} | {carry} | {runs} | {row['events']} "
            f"| {row['history_bytes']:,} B | {row['distinct_message_bytes']:,} B "
            f"| {row['ratio']}x | {row['ratio_without_script']}x |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    # Without the SDK's teardown, which can abort at exit after a Replayer or a dev server.
    exit_now(asyncio.run(main()))
