"""A worker process of the floor (bench/floor_workflow.py), as bench.capacity starts it beside the
agent's worker processes:

    python -m bench.floor_worker --address HOST:PORT --task-queue QUEUE

The workflow and its two activities on the SDK's defaults (the stock sandbox, the default slots),
as a team that writes the loop by hand runs it. It serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import click
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import workload
from durable_agent.serving.command_line import Command, parse


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option("--address", required=True, help="the Temporal frontend")
@click.option("--task-queue", required=True)
def command_line(address: str, task_queue: str) -> tuple[str, str]:
    return address, task_queue


async def main(argv: list[str] | None = None) -> int:
    address, task_queue = parse(command_line, argv)
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    async with workload.floor_worker(client, task_queue):
        await stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
