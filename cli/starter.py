"""Start an agent run and print its answer; decide on and follow runs already going.

    python starter.py "PROMPT" [--provider scripted|openai|anthropic] [--model M] [--max-steps N]
                      [--plan] [--approve-all] [--allow TOOL]... [--label TEXT]
                      [--address HOST:PORT] [--no-wait] [--json] [--trace] [--conversation]
    python starter.py - [the run's options]          (the prompt from standard input)
    python starter.py --prompt-file FILE [the run's options]
    python starter.py chat [PROMPT | --prompt-file FILE] [the run's options]
    python starter.py send WORKFLOW_ID TEXT [--wait]
    python starter.py interrupt WORKFLOW_ID
    python starter.py end WORKFLOW_ID
    python starter.py approve WORKFLOW_ID [--comment TEXT] [--version N]
    python starter.py reject WORKFLOW_ID --feedback TEXT [--version N]
    python starter.py calls WORKFLOW_ID
    python starter.py approve-call WORKFLOW_ID CALL_ID [--remember] [--reason TEXT]
    python starter.py deny-call WORKFLOW_ID CALL_ID --reason TEXT [--remember]
    python starter.py watch WORKFLOW_ID [--from OFFSET] [--json]
    python starter.py status WORKFLOW_ID
    python starter.py list --awaiting-approval [--json]
    python starter.py result WORKFLOW_ID [--json] [--trace]
    python starter.py trace WORKFLOW_ID [--json]
    python starter.py stats [--label TEXT] [--limit N] [--json]
    python starter.py fork WORKFLOW_ID --step K [--provider P] [--model M] [--system TEXT]
                      [--max-steps N] [--approve-all] [--allow TOOL]... [--no-wait] [--json]
    python starter.py diff WORKFLOW_A WORKFLOW_B [--json]
    python starter.py eval --label L --fork-step K --provider P [--model M] [--limit N]
                      [--score MODULE:FUNCTION] [--json]
    python starter.py worker [--address HOST:PORT] [--namespace NS] [--task-queue QUEUE]

Without --address (and without $TEMPORAL_ADDRESS) a run is self-contained: it starts an embedded
Temporal dev server with the Web UI and an in-process worker, runs the agent, and stops both. It
follows the run's progress stream, and shows each plan (--plan) and each tool call that waits for
a person (the calls of tools that change data, unless --approve-all or --allow) at the terminal,
reading the decision from stdin. With an address it only starts the run; a `worker.py` must serve
it. `watch` follows the progress stream of a run started anywhere, one line per event. The
subcommands always need an address, and take --namespace. `worker` serves runs, as `python
worker.py` does, so that an installed project has one command (`durable-agent`). A prompt that is
a subcommand's name goes after `--`.

--trace prints the run's steps as a table once it has ended (on stderr; with --json, as the
`trace` key instead). `trace` prints that table on stdout for a running or ended run. `stats` reads
the runs that ended from the server and prints, per --label given to their runs, the steps,
tokens and cost of the completed ones, and the max_steps that distribution suggests.

`fork` starts a new run from a run's step K (its transcript through step K's tool results, read
from its history; none of those tools run again) and follows it like a run; `diff` shows where
two runs diverge; `eval` forks a label's last completed runs with another model and compares
each fork with its original (docs/debugging.md).

A prompt, and every other text argument, is UTF-8 text; a command line's words are bounded
(128 KiB each on Linux), and a file's or standard input's prompt is not.

Exit status: 0 completed (or started, with --no-wait; or done, for a subcommand); 1 the run
failed, or the server refused or could not be reached; 2 bad command line.

This module parses, connects and hands over; what each command does lives in the `cli` package
(cli/__init__.py lists its modules).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import assert_never

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from ..client.agent_client import (
    AgentClient,
    AgentUpdateNotDelivered,
    SearchAttributesNotRegistered,
)
from . import conversation, decide, fork as forks, read, worker
from .args import (
    ApproveCall,
    ApprovePlan,
    DenyCall,
    Diff,
    End,
    Eval,
    Fork,
    Interrupt,
    ListCalls,
    ListWaiting,
    OfRun,
    RejectPlan,
    Result,
    RunArgs,
    Send,
    Serve,
    Stats,
    Status,
    Subcommand,
    Trace,
    Watch,
    parse_command_line,
)
from .plumbing import CommandLineError, exit_now, one_line, say
from .run import Following, follow, run, unreachable


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_command_line(argv)
    except CommandLineError as stop:
        return int(stop.code or 2)
    if isinstance(args, Serve):
        return worker.main(list(args.argv), prog=f"starter.py {Serve.command}")
    try:
        return asyncio.run(dispatch(args))
    except KeyboardInterrupt:
        say("interrupted")
        return 130


async def main_async(argv: Sequence[str] | None = None) -> int:
    """`main` inside a running event loop (the tests use it), for a run or a subcommand."""
    try:
        args = parse_command_line(argv)
    except CommandLineError as stop:
        return int(stop.code or 2)
    if isinstance(args, Serve):
        say(f"starter.py {Serve.command}: error: a worker runs its own event loop: use main()")
        return 2
    return await dispatch(args)


async def dispatch(args: RunArgs | Subcommand) -> int:
    """A run starts (and connects, or starts its own server) in cli.run; a subcommand connects
    here and is handed its run. A server that refuses (an update it did not take, a namespace
    without the runs' search attributes included) is one line and exit status 1."""
    if isinstance(args, RunArgs):
        return await run(args)
    try:
        client = await AgentClient.connect(args.address, namespace=args.namespace)
    except RuntimeError as error:
        if isinstance(args, Result):  # it prints like a run, JSON object included
            return unreachable(args.address, error, args.workflow_id, Following.of(args))
        return unreachable(args.address, error, None, None)
    try:
        return await hand_over(client, args)
    except (
        RPCError,
        WorkflowQueryFailedError,
        AgentUpdateNotDelivered,
        SearchAttributesNotRegistered,
    ) as error:
        target = args.command + (f" {args.workflow_id}" if isinstance(args, OfRun) else "")
        say(f"{target}: {one_line(error)}")
        return 1


async def hand_over(client: AgentClient, args: Subcommand) -> int:
    match args:
        case ApprovePlan() | RejectPlan():
            return await decide.decide_plan(client.run(args.workflow_id), args)
        case ApproveCall() | DenyCall():
            return await decide.decide_call(client.run(args.workflow_id), args)
        case ListCalls():
            return await read.list_calls(client.run(args.workflow_id), args)
        case Watch():
            return await read.watch(client.run(args.workflow_id), args)
        case Status():
            return await read.status(client.run(args.workflow_id), args)
        case ListWaiting():
            return await read.list_waiting(client, args)
        case Result():
            return await follow(client.run(args.workflow_id), Following.of(args))
        case Trace():
            return await read.trace(client.run(args.workflow_id), args)
        case Stats():
            return await read.stats(client, args)
        case Send():
            return await conversation.send(client.run(args.workflow_id), args)
        case Interrupt():
            return await conversation.interrupt(client.run(args.workflow_id), args)
        case End():
            return await conversation.end(client.run(args.workflow_id), args)
        case Fork():
            return await forks.fork(client, args)
        case Diff():
            return await forks.diff(client, args)
        case Eval():
            return await forks.evaluate(client, args)
    assert_never(args)


def console_main() -> None:
    """The `durable-agent` console script that an installed project puts on the PATH."""
    exit_now(main())


if __name__ == "__main__":
    console_main()
