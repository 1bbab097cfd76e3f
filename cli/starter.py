"""The `durable-agent` command (and the checkout's starter.py): start an agent run and print
its answer, or decide on and follow runs already going, or serve them (`worker`).

    durable-agent "PROMPT" | - | --prompt-file FILE [options]     a run (`--help`)
    durable-agent chat [PROMPT] [options]                         a conversation at the terminal
    durable-agent COMMAND ... --address HOST:PORT                 approve, calls, watch, fork, ...
    durable-agent worker [options]                                serve runs, as worker.py does
    durable-agent contract [--example]                            the wire contract, as JSON
    durable-agent serve [--address HOST:PORT] [--port N]          the HTTP API

Each command's --help, and docs/cli.md, say the rest. A prompt that is a command's name goes
after `--`. Exit status: 0 completed (or started, with --no-wait; or done, for a subcommand); 1
the run failed, or the server refused or could not be reached; 2 bad command line.

This module parses, connects and hands over; each command lives in the `cli` package
(cli/__init__.py lists its modules).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from collections.abc import Sequence

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from ..client.agent_client import (
    AgentClient,
    AgentUpdateNotDelivered,
    SearchAttributesNotRegistered,
)
from ..encryption import payload_codec
from ..serving.command_line import (
    Command,
    CommandLineError,
    exit_now,
    invoked_name,
    one_line,
    parse,
    say,
)
from . import contract, conversation, decide, fork, read, run, serve, worker
from .args import CHAT, RUN, RunArgs, Subcommand, invoked_as, parse_run, program

SUBCOMMANDS = {
    str(command.name): command
    for module in (decide, read, run, conversation, fork)
    for command in vars(module).values()
    if isinstance(command, Command)
}
"""Each module's subcommands, in the order of --help."""
PROGRAMS = {"worker": worker.main, "contract": contract.main, "serve": serve.main}
"""The commands that run on their own: a worker and the HTTP API, each with its own event loop,
and the wire contract, which needs no server. Each parses its own command line; `main` exits as
a bad one says."""
RUN.epilog = f"Commands, each with --help: {', '.join([str(CHAT.name), *SUBCOMMANDS, *PROGRAMS])}."


def parse_command_line(argv: Sequence[str] | None = None) -> RunArgs | Subcommand:
    """A subcommand when the first word names one (`chat` too), else a run: a prompt that is a
    command's name goes after `--`."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == [CHAT.name]:
        args: RunArgs | Subcommand = parse_run(words[1:], chat=True)
    elif words and words[0] in SUBCOMMANDS:
        args = parse(SUBCOMMANDS[words[0]], words[1:], f"{program()} {words[0]}")
    else:
        args = parse_run(words)
    try:
        payload_codec.data_converter()  # a malformed key configuration is a usage error
    except payload_codec.PayloadKeyError as error:
        say(f"{program()}: error: {error}")
        raise CommandLineError(2) from None
    return args


def main(argv: Sequence[str] | None = None, *, prog: str | None = None) -> int:
    """The command line `argv` (default: this process's), its messages naming the command
    `prog` (default: starter.py)."""
    if prog is not None:
        invoked_as(prog)
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        if words[:1] and words[0] in PROGRAMS:
            return PROGRAMS[words[0]](words[1:], prog=f"{program()} {words[0]}")
        return asyncio.run(dispatch(parse_command_line(words)))
    except CommandLineError as stop:
        return int(stop.code or 0)
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except BrokenPipeError:
        # Whoever read stdout has gone (`durable-agent contract | head`): nothing more can be
        # said there, and the interpreter must not try again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


async def dispatch(args: RunArgs | Subcommand) -> int:
    """A run starts (and connects, or starts its own server) in cli.run; a subcommand connects
    here and is handed its run. A server that refuses (an update it did not take, a namespace
    without the runs' search attributes included) is one line and exit status 1."""
    if isinstance(args, RunArgs):
        return await run.run(args)
    following = args.following
    assert following.address is not None  # every subcommand needs one
    try:
        client = await AgentClient.connect(following.address, namespace=following.namespace)
    except RuntimeError as error:  # `result` prints like a run, JSON object included
        trace = args.options.get("trace", False)
        shown = dataclasses.replace(following, trace=trace) if args.command == "result" else None
        return run.unreachable(following.address, error, args.workflow_id, shown)
    try:
        return await args(client)
    except decide.Refused:  # said in one line already
        return 1
    except (
        RPCError,
        WorkflowQueryFailedError,
        AgentUpdateNotDelivered,
        SearchAttributesNotRegistered,
    ) as error:
        say(f"{' '.join(filter(None, (args.command, args.workflow_id)))}: {one_line(error)}")
        return 1


def console_main() -> None:
    """The `durable-agent` console script that an installed project puts on the PATH (and the
    checkout's starter.py): its messages name the command as it was typed."""
    exit_now(main(prog=invoked_name()))


if __name__ == "__main__":
    console_main()
