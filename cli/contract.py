"""`durable-agent contract`: the wire contract as JSON on stdout (client/contract.py), or with
--example a minimal workflow input that runs the scripted demo. Needs no server."""

from __future__ import annotations

import json
from collections.abc import Sequence

import click

from ..client.contract import contract, example_input
from ..serving.command_line import Command, parse
from ..workflows.inputs import DEFAULT_TASK_QUEUE


@click.command("contract", cls=Command)
@click.option("--example", is_flag=True, help="print a minimal input that runs the scripted demo")
@click.option("--task-queue", default=DEFAULT_TASK_QUEUE, help="the runs' task queue")
def command(example: bool, task_queue: str) -> None:
    """Print the wire contract: the workflow's input and result, and each update, signal and
    query, as JSON Schemas (docs/contract.md)."""
    print(json.dumps(example_input() if example else contract(task_queue)))


def main(argv: Sequence[str], *, prog: str = "starter.py contract") -> int:
    parse(command, argv, prog)  # a bad one raises CommandLineError, which starter.main reports
    return 0
