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

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from bench import workload
from durable_agent.cli.plumbing import OneLineArgumentParser


async def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m bench.floor_worker", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--address", required=True, help="the Temporal frontend")
    parser.add_argument("--task-queue", required=True)
    args = parser.parse_args(argv)
    client = await Client.connect(args.address, data_converter=pydantic_data_converter)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    async with workload.floor_worker(client, args.task_queue):
        await stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
