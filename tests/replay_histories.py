"""Replay every committed history (tests/histories) in this process, as a worker would.

    python -m tests.replay_histories [--sandbox fast|stock]

Prints `replayed N histories` and exits 0, or prints each failure and exits 1. Run in a
subprocess by tests/test_determinism.py with other string hash seeds (PYTHONHASHSEED)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click
from temporalio.client import WorkflowHistory

from durable_agent.activities import toolkits
from durable_agent.serving.command_line import Command, parse
from durable_agent.serving.worker import replayer

HISTORIES = Path(__file__).parent / "histories"


async def replay_all(sandbox: str) -> int:
    import tests.tools_for_tests  # noqa: F401  (registers the tools the histories used)

    toolkits.load_default_tools()
    failures = []
    paths = sorted(HISTORIES.glob("*.json"))
    for path in paths:
        history = WorkflowHistory.from_json(path.stem, path.read_text())
        result = await replayer(sandbox).replay_workflow(  # type: ignore[arg-type]
            history, raise_on_replay_failure=False
        )
        if result.replay_failure is not None:
            failures.append(f"{path.name}: {result.replay_failure}")
    for failure in failures:
        print(failure)
    if failures:
        return 1
    print(f"replayed {len(paths)} histories")
    return 0


@click.command(cls=Command)
@click.option("--sandbox", type=click.Choice(["fast", "stock"]), default="stock")
def command_line(sandbox: str) -> str:
    return sandbox


if __name__ == "__main__":
    code = asyncio.run(replay_all(parse(command_line)))
    sys.stdout.flush()
    # Without the SDK's teardown, as the benchmark scripts exit: its runtime's threads were seen
    # to abort the interpreter as it finalised (PyGILState_Release), once in many runs, after
    # every history had replayed.
    os._exit(code)
