"""`durable-agent serve`: the HTTP API (serving/http_api.py) and its browser console
(serving/console.py) on uvicorn. With --address it serves that cluster's runs; without, it starts
the embedded dev server and a worker as a self-contained run does, so one command gives a working
API and console offline. It binds 127.0.0.1 unless told otherwise, and every request needs the
token: $AGENT_API_TOKEN, or one made here and printed once, with a console link that carries it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from ..serving import http_api
from ..serving.command_line import Command, parse, refuse, say
from ..serving.http_server import serve_api
from ..serving.served_agent import load_served_agent
from ..serving.streams import stream_bounds
from ..serving.worker import SETUP_ERRORS, check_worker, setup_error
from ..workflows.inputs import DEFAULT_TASK_QUEUE

DEFAULT_PORT = 8000


@click.command("serve", cls=Command)
@click.option("--address", envvar="TEMPORAL_ADDRESS", show_envvar=True, help="Temporal frontend")
@click.option("--namespace", default="default", help="the server's namespace")
@click.option("--task-queue", default=DEFAULT_TASK_QUEUE, help="the runs' task queue")
@click.option("--host", default="127.0.0.1", help="the interface to listen on")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, help="0: any free")
@click.option("--tools", multiple=True, help="self-contained: the worker's, as `worker --tools`")
@click.option("--agent", type=Path, help="the agent A2A and AG-UI offer: a run's input, no prompt")
@click.option("--agent-card", type=Path, help="with --agent: A2A card fields (name, skills...)")
def command(**options: Any) -> dict[str, Any]:
    """Serve the HTTP API (docs/http-api.md) until interrupted."""
    if options["tools"] and options["address"]:
        refuse("--tools is for the embedded worker; with --address, give it to the worker")
    if options["agent_card"] and not options["agent"]:
        refuse("--agent-card describes the agent --agent offers: give --agent FILE too")
    return options


def main(argv: Sequence[str], *, prog: str = "starter.py serve") -> int:
    options = parse(command, argv, prog)  # a bad one raises CommandLineError: see starter.main
    try:
        token = http_api.api_token()
        bounds = stream_bounds()
        served = options["agent"] and load_served_agent(options["agent"], options["agent_card"])
        if options["address"] is None:
            check_worker(options["tools"])
    except SETUP_ERRORS as error:
        say(f"{prog}: error: {setup_error(error)}")
        return 2
    where = (options["address"], options["namespace"], options["task_queue"])
    try:
        asyncio.run(serve_api(*where, options["host"], options["port"], token, bounds, served))
    except KeyboardInterrupt:
        return 0
    except RuntimeError as error:  # the server cannot be reached
        say(f"{prog}: {error}")
        return 1
    return 0
