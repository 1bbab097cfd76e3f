"""Start an agent run and print its answer; decide on and follow runs already going.

    python starter.py "PROMPT" [--provider scripted|openai|anthropic] [--model M] [--max-steps N]
                      [--plan] [--approve-all] [--allow TOOL]... [--label TEXT]
                      [--address HOST:PORT] [--no-wait] [--json] [--trace]
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

Without --address (and without $TEMPORAL_ADDRESS) a run is self-contained: it starts an embedded
Temporal dev server with the Web UI and an in-process worker, runs the agent, and stops both. It
follows the run's progress stream, and shows each plan (--plan) and each tool call that waits for
a person (the calls of tools that change data, unless --approve-all or --allow) at the terminal,
reading the decision from stdin. With an address it only starts the run; a `worker.py` must serve
it. `watch` follows the progress stream of a run started anywhere, one line per event. The
subcommands always need an address, and take --namespace. A prompt that is a subcommand's name
goes after `--`.

--trace prints the run's steps as a table once it has ended (on stderr; with --json, as the
`trace` key instead). `trace` prints that table on stdout for a running or ended run. `stats` reads
the runs that ended from the server and prints, per --label given to their runs, the steps,
tokens and cost of the completed ones, and the max_steps that distribution suggests.

Exit status: 0 completed (or started, with --no-wait; or done, for a subcommand); 1 the run
failed, or the server refused or could not be reached; 2 bad command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError

import payload_codec
from activities.demo_script import SUPPORT_DEMO_SYSTEM, support_demo_script
from agent_client import AgentClient, AgentRun, AgentRunFailed, step_stats
from cli.plumbing import CommandLineError, OneLineArgumentParser, exit_now, temporal_address
from cli.tables import shorten, stats_table, trace_table
from worker import build_worker, embedded_dev_server, free_port
from workflows.models import (
    DEFAULT_TASK_QUEUE,
    AgentEvent,
    AgentInput,
    AgentResult,
    CompensationRecord,
    Limits,
    ModelSettings,
    PlanState,
    RunStatus,
    ScriptedCall,
    ScriptedTurn,
    StepRecord,
    ToolApprovalPolicy,
    ToolCallRecord,
    Usage,
)

SCRIPT_ADAPTER = TypeAdapter(list[ScriptedTurn])
DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-6"}
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
LIST_QUERY_TIMEOUT_SECONDS = 5.0
"""`list` asks each waiting run for its plan; a run whose worker is gone does not answer."""
CANCEL_WAIT_SECONDS = 10.0
NO_LABEL = "(no label)"
DEFAULT_STATS_LIMIT = 500
WATCHER_STOP_SECONDS = 10.0
SUBCOMMANDS = (
    "approve",
    "reject",
    "approve-call",
    "deny-call",
    "calls",
    "watch",
    "status",
    "list",
    "result",
    "trace",
    "stats",
)
DEMO_PLAN = [
    "Look up the customer's orders by their email.",
    "Check the customer and the tracking of the latest order.",
    "Tell the customer where that order is.",
]
APPROVALS = ("", "y", "yes")


def parse_command_line(argv: Sequence[str] | None = None) -> Any:
    """A subcommand when the first word names one, else a run."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = parse_subcommand(words) if words and words[0] in SUBCOMMANDS else parse_args(words)
    try:
        payload_codec.data_converter()  # a malformed key configuration is a usage error
    except payload_codec.PayloadKeyError as error:
        _say(f"starter.py: error: {error}")
        raise CommandLineError(2) from None
    return args


def parse_args(argv: list[str] | None) -> Any:
    parser = OneLineArgumentParser(
        prog="starter.py",
        description="Start an agent run.",
        epilog="To decide on and follow runs on a server: starter.py {"
        + ",".join(SUBCOMMANDS)
        + "} ... (each with --help).",
    )
    parser.add_argument("prompt", help="what the agent should do")
    parser.add_argument(
        "--provider",
        choices=["scripted", "openai", "anthropic"],
        help="default: the provider whose key is set (OPENAI_API_KEY first, then "
        "ANTHROPIC_API_KEY), else the scripted offline demo",
    )
    parser.add_argument(
        "--model",
        help="model name (defaults: "
        + ", ".join(f"{p} {m}" for p, m in DEFAULT_MODELS.items())
        + ")",
    )
    parser.add_argument(
        "--script",
        type=Path,
        help="scripted provider: play this conversation (a JSON list of ScriptedTurn objects) "
        "instead of the built-in support demo",
    )
    parser.add_argument("--max-steps", type=_positive_int, default=Limits().max_steps)
    parser.add_argument(
        "--max-cost-usd", type=_positive_float, help="fail the run once it has cost more"
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="plan mode: the model submits a plan and the run waits for a person to approve it "
        "(self-contained: asked here, on stdin; with --address: `starter.py approve`)",
    )
    parser.add_argument(
        "--approve-all",
        action="store_true",
        help="a trusted job: no tool call waits for a person (by default the calls of tools "
        "that change data do: self-contained, asked here; with --address, `approve-call`)",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="TOOL",
        help="the calls of this tool run without asking (repeatable)",
    )
    parser.add_argument(
        "--label",
        help="the kind of task (e.g. order-status), kept in the run's memo: "
        "`starter.py stats` groups runs by it",
    )
    parser.add_argument("--address", help="Temporal frontend; without it the run is self-contained")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default=DEFAULT_TASK_QUEUE)
    parser.add_argument("--no-wait", action="store_true", help="print the workflow id and return")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="once the run has ended, print its steps as a table on stderr (with --json: the "
        "step records, as the `trace` key)",
    )
    parser.add_argument(
        "--linger",
        action="store_true",
        help="self-contained only: keep the dev server and its Web UI up after the run, "
        "until Ctrl-C, to inspect the run's history",
    )
    args = parser.parse_args(argv)
    args.command = "run"
    if not args.prompt.strip():
        parser.error("the prompt is empty")
    if args.label is not None and not args.label.strip():
        parser.error("--label is empty")
    args.address = temporal_address(args.address)
    if args.linger and args.address is not None:
        parser.error("--linger is for self-contained runs; with --address the server is yours")
    if args.no_wait and args.address is None:
        parser.error(
            "--no-wait needs --address (or TEMPORAL_ADDRESS): a self-contained run "
            "stops its server when it returns"
        )
    if args.no_wait and args.trace:
        parser.error(
            "--trace prints the steps once the run has ended; with --no-wait, use "
            "`starter.py trace WORKFLOW_ID` later"
        )
    args.provider = args.provider or next(
        (p for p, variable in KEY_VARIABLES.items() if os.environ.get(variable)), "scripted"
    )
    if args.script is not None:
        if args.provider != "scripted":
            parser.error("--script is for the scripted provider")
        try:
            args.script = SCRIPT_ADAPTER.validate_json(args.script.read_bytes())
        except (OSError, ValueError) as error:
            parser.error(f"--script {args.script}: {str(error).splitlines()[0]}")
    return args


def parse_subcommand(argv: list[str]) -> Any:
    common = OneLineArgumentParser(add_help=False)
    common.add_argument(
        "--address", help="Temporal frontend (default: $TEMPORAL_ADDRESS; one is needed)"
    )
    common.add_argument("--namespace", default="default")
    common.add_argument("--json", action="store_true", help="print JSON on stdout")
    parser = OneLineArgumentParser(
        prog="starter.py", description="Decide on and follow agent runs on a Temporal server."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help, description=help)
        if name not in ("list", "stats"):
            sub.add_argument("workflow_id", help="the run's workflow id")
        if name in ("approve-call", "deny-call"):
            sub.add_argument("call_id", help="the tool call's id (see `calls`)")
            sub.add_argument(
                "--remember",
                action="store_true",
                help="decide the run's later calls of the same tool the same way",
            )
        return sub

    approve = command("approve", "approve the plan a run waits with")
    approve.add_argument("--comment", help="a note for the model, passed on with the approval")
    reject = command("reject", "reject the plan a run waits with; the model plans again")
    reject.add_argument("--feedback", required=True, help="what the model should change")
    for decide in (approve, reject):
        decide.add_argument(
            "--version",
            type=_positive_int,
            help="decide only if plan version N is the one waiting (default: whichever waits)",
        )
    approve_call = command("approve-call", "let a tool call that waits for a person run")
    approve_call.add_argument("--reason", help="a note kept with the decision")
    deny_call = command(
        "deny-call", "deny a tool call that waits; the model gets the reason as its result"
    )
    deny_call.add_argument("--reason", required=True, help="what the model is told")
    command("calls", "list the run's tool calls that wait for a person")
    watch = command(
        "watch",
        "follow the run's progress stream, one line per event, to the run's end (a run "
        "started elsewhere, or one that has ended: then what it published)",
    )
    watch.add_argument(
        "--from",
        dest="from_offset",
        type=_non_negative_int,
        default=0,
        metavar="OFFSET",
        help="start at this event (each line starts with its offset; resume at the next one)",
    )
    command("status", "print the run's status query as JSON")
    listing = command("list", "list the runs whose plan or tool calls wait for approval")
    listing.add_argument(
        "--awaiting-approval",
        action="store_true",
        required=True,
        help="runs waiting on a person",
    )
    result = command("result", "wait for the run's answer and print it like a run started here")
    result.add_argument(
        "--trace",
        action="store_true",
        help="then print its steps as a table on stderr (with --json: as the `trace` key)",
    )
    command(
        "trace",
        "print the run's steps as a table, one row per step, with totals (a running run needs "
        "its worker; an ended run does not)",
    )
    stats = command(
        "stats",
        "per label, the steps, tokens and cost of the runs that completed, and the max_steps "
        "their distribution suggests (twice the p95 of the steps)",
    )
    stats.add_argument("--label", help="only the runs started with this --label")
    stats.add_argument(
        "--limit",
        type=_positive_int,
        default=DEFAULT_STATS_LIMIT,
        help=f"read at most N runs, newest first (default {DEFAULT_STATS_LIMIT})",
    )

    args = parser.parse_args(argv)
    chosen = commands.choices[args.command]
    args.address = temporal_address(args.address)
    if args.address is None:
        chosen.error(
            f"{args.command} needs --address (or TEMPORAL_ADDRESS): the runs live on a "
            "Temporal server"
        )
    if getattr(args, "workflow_id", "x").strip() == "":
        chosen.error("the workflow id is empty")
    if args.command == "reject" and not args.feedback.strip():
        chosen.error("--feedback is empty: the model needs to know what to change")
    if args.command == "deny-call" and not args.reason.strip():
        chosen.error("--reason is empty: the model needs to know why")
    return args


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"not a non-negative integer: {text!r}")
    return value


_non_negative_int.__name__ = "non-negative integer"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"not a positive integer: {text!r}")
    return value


_positive_int.__name__ = "positive integer"


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"not a positive number: {text!r}")
    return value


_positive_float.__name__ = "positive number"


def demo_plan_script() -> list[ScriptedTurn]:
    """The support demo in plan mode: submit a plan first, carry it out once approved."""
    first, *rest = support_demo_script()
    return [
        ScriptedTurn(
            text="I will look the order up and tell the customer where it is.",
            calls=[ScriptedCall(name="submit_plan", arguments={"steps": DEMO_PLAN})],
        ),
        first.model_copy(update={"expect": "approved"}),
        *rest,
    ]


def build_input(args: Any) -> AgentInput:
    if args.provider == "scripted":
        demo = demo_plan_script() if args.plan else support_demo_script()
        model = ModelSettings(
            provider="scripted",
            model=args.model or "scripted-demo",
            script=args.script if args.script is not None else demo,
        )
    else:
        model = ModelSettings(
            provider=args.provider, model=args.model or DEFAULT_MODELS[args.provider]
        )
    return AgentInput(
        prompt=args.prompt,
        system=SUPPORT_DEMO_SYSTEM,
        model=model,
        limits=Limits(max_steps=args.max_steps, max_cost_usd=args.max_cost_usd),
        plan=args.plan,
        label=args.label,
        tool_approval=ToolApprovalPolicy(approve_all=args.approve_all, allow=args.allow),
    )


async def main_async(argv: Sequence[str] | None = None) -> int:
    """`main` inside a running event loop (the tests use it)."""
    try:
        args = parse_command_line(argv)
    except CommandLineError as stop:
        return int(stop.code or 2)
    return await dispatch(args)


async def dispatch(args: Any) -> int:
    if args.command == "run":
        return await run(args)
    return await run_subcommand(args)


async def run(args: Any) -> int:
    agent_input = build_input(args)
    if args.provider == "scripted" and args.script is None and not args.json:
        _say(
            "scripted model: it replays the seeds' support conversation whatever the prompt"
            + ("; its plan expects to be approved" if args.plan else "")
            + "; set OPENAI_API_KEY or ANTHROPIC_API_KEY for a real model"
        )
    if args.address is not None:
        try:
            client = await AgentClient.connect(
                args.address, namespace=args.namespace, task_queue=args.task_queue
            )
        except RuntimeError as error:
            message = f"cannot connect to Temporal at {args.address}: {error}"
            _say(message)
            if args.json:
                _print_json(
                    None,
                    "failed",
                    error={"type": "ConnectionError", "message": message},
                    trace=_traced(args, []),
                )
            return 1
        return await _start_and_report(client, agent_input, args)

    ui_port = free_port()
    async with embedded_dev_server(ui_port=ui_port) as env:
        _say(f"embedded Temporal dev server; Web UI: http://127.0.0.1:{ui_port}")
        async with build_worker(env.client, args.task_queue):
            client = AgentClient(env.client, args.task_queue)
            status = await _start_and_report(client, agent_input, args)
            if args.linger:
                _say(f"the run is in the Web UI at http://127.0.0.1:{ui_port}; Ctrl-C to stop")
                await _wait_for_interrupt()
            return status


async def _wait_for_interrupt() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)


async def _start_and_report(client: AgentClient, agent_input: AgentInput, args: Any) -> int:
    workflow_id = f"agent-{uuid.uuid4().hex[:12]}"
    try:
        agent_run = await client.start(agent_input, workflow_id=workflow_id)
    except RPCError as error:
        message = f"could not start the run: {error}"
        _say(message)
        if args.json:
            _print_json(
                workflow_id,
                "failed",
                error={"type": "StartError", "message": message},
                trace=_traced(args, []),
            )
        return 1
    if args.no_wait:
        if args.json:
            _print_json(workflow_id, "running")
        else:
            print(workflow_id)
        return 0
    if not args.json:
        _say(f"workflow {workflow_id} started")
    # Self-contained, the server ends with this process: only this terminal can decide.
    return await _follow(agent_run, args, ask=args.address is None)


async def _follow(agent_run: AgentRun, args: Any, *, ask: bool) -> int:
    """Wait for the run's end, printing its steps and its plans; print the outcome."""
    lines = _StepLines()
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch(agent_run, lines, stop, ask=ask, args=args))
    outcome = asyncio.create_task(agent_run.result())
    try:
        await asyncio.wait({watcher, outcome}, return_when=asyncio.FIRST_COMPLETED)
        if not outcome.done():
            # The progress lines may stop early (a stream that cannot be read is not fatal);
            # only a question left undecided at the terminal ends the wait.
            undecided = None if watcher.exception() else watcher.result()
            if undecided is not None:
                return await _no_decision(agent_run, undecided, outcome, args)
            await asyncio.wait({outcome})
    finally:
        # Let the watcher finish the call it is making rather than cancel it half-way.
        stop.set()
        await asyncio.wait({watcher}, timeout=WATCHER_STOP_SECONDS)
        for task in (watcher, outcome):
            task.cancel()  # nothing happens to a task that is done
        await asyncio.gather(watcher, outcome, return_exceptions=True)
    workflow_id = agent_run.id
    try:
        result = outcome.result()
    except AgentRunFailed as failure:
        return _report_failure(failure, lines, args)
    except RPCError as error:
        message = f"run {workflow_id}: {error.message}"
        _say(message)
        if args.json:
            _print_json(
                workflow_id,
                "failed",
                error={"type": "RPCError", "message": message},
                trace=_traced(args, []),
            )
        return 1
    lines.show(result.step_records)
    if args.json:
        _print_json(
            workflow_id,
            "completed",
            answer=result.answer,
            steps=result.steps,
            usage=result.usage,
            trace=_traced(args, result.step_records),
        )
    else:
        print(result.answer)
        _say(f"{result.steps} steps, {_usage_text(result.usage)}")
        if args.trace:
            _say(trace_table(result.step_records, compactions=result.compactions))
    return 0


async def _no_decision(
    agent_run: AgentRun, undecided: str, outcome: asyncio.Task[Any], args: Any
) -> int:
    """stdin ended with a question undecided (asked only when self-contained)."""
    message = (
        f"stdin ended before a decision on {undecided} of {agent_run.id}; nothing here can "
        "decide it (run at a terminal, or use --address and the approve subcommands)"
    )
    _say(message)
    try:
        last: RunStatus | None = await agent_run.status()
    except (RPCError, WorkflowQueryFailedError):
        last = None
    # The run cannot outlive this process's server: cancel it, so that it ends as a run, not as
    # a workflow torn down mid-wait, and let the wait for its result end with it.
    with contextlib.suppress(RPCError):
        await agent_run.handle.cancel()
        await asyncio.wait({outcome}, timeout=CANCEL_WAIT_SECONDS)
    records = last.step_records if last is not None else []
    if args.json:
        _print_json(
            agent_run.id,
            "failed",
            steps=last.step if last is not None else 0,
            usage=last.usage if last is not None else None,
            error={"type": "NoDecision", "message": message},
            trace=_traced(args, records),
        )
    elif args.trace:
        _say(trace_table(records))
    return 1


class _StepLines:
    """Prints each finished step once, on stderr."""

    def __init__(self) -> None:
        self.printed = 0

    def show(self, records: list[StepRecord]) -> None:
        _print_steps(records, since=self.printed)
        self.printed = max(self.printed, len(records))


class _StepsFromEvents:
    """Each step's record, rebuilt from the progress stream for the step lines: a step is
    finished once its tools have results, when the next step starts or the run ends."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self.finished = 0

    def add(self, event: AgentEvent) -> list[StepRecord]:
        match event.kind:
            case "step_finished":
                self.records.append(
                    StepRecord(
                        step=event.step,
                        model=event.model or "",
                        model_latency_ms=event.latency_ms or 0,
                        model_attempts=event.attempts or 1,
                        usage=event.usage or Usage(),
                        finish_reason=event.outcome,
                    )
                )
            case "tool_call_finished" if self.records:
                self.records[-1].tool_calls.append(
                    ToolCallRecord.model_validate(
                        {
                            "id": event.call_id,
                            "name": event.tool,
                            "arguments": event.arguments or "",
                            "outcome": event.outcome,
                            "error": event.text,
                            "latency_ms": event.latency_ms or 0,
                            "attempts": event.attempts or 0,
                        }
                    )
                )
            case "step_started" | "completed" | "failed":
                self.finished = len(self.records)
        return self.records[: self.finished]


async def _watch(
    agent_run: AgentRun, lines: _StepLines, stop: asyncio.Event, *, ask: bool, args: Any
) -> str | None:
    """Follow the run's progress stream to its end: one line per finished step, and each plan
    and tool call that waits for a person, once. With `ask`, the question is put here; returns
    what was left undecided when stdin ended, else None."""
    steps = _StepsFromEvents()
    async for item in agent_run.events():
        event = item.data
        lines.show(steps.add(event))
        question: str | None = None
        if event.kind == "plan_submitted":
            status = await agent_run.status()
            plan = status.plan
            if plan is None or plan.status != "awaiting_approval":
                continue  # decided already, elsewhere
            _show_plan(agent_run.id, plan, ask=ask, args=args)
            question = f"plan v{plan.version}"
        elif event.kind == "approval_requested":
            _show_call(agent_run.id, event, ask=ask, args=args)
            question = f"tool call {event.call_id} ({event.tool})"
        if question is None or not ask:
            continue
        line = await _read_line(stop)
        if stop.is_set():
            break
        if line is None:
            return question
        if event.kind == "plan_submitted" and plan is not None:
            await _decide_at_terminal(agent_run, plan, line)
        else:
            await _decide_call_at_terminal(agent_run, event, line)
    return None


def _show_plan(workflow_id: str, plan: PlanState, *, ask: bool, args: Any) -> None:
    _say(f"plan v{plan.version} of {workflow_id} waits for approval:")
    for number, step in enumerate(plan.steps, start=1):
        _say(f"  {number}. {step}")
    if ask:
        _say("Approve it? Enter (or y) approves; anything else is your feedback, to plan again:")
    else:
        where = f" --address {args.address}"
        if args.namespace != "default":
            where += f" --namespace {args.namespace}"
        _say(
            f"decide with: starter.py approve {workflow_id}{where} [--comment TEXT], or "
            f"starter.py reject {workflow_id}{where} --feedback TEXT"
        )


def _show_call(workflow_id: str, event: AgentEvent, *, ask: bool, args: Any) -> None:
    _say(
        f"tool call {event.call_id} of {workflow_id} waits for approval: "
        f"{event.tool} {event.arguments}"
    )
    if ask:
        _say(
            f"Run it? Enter (or y) approves; 'always' approves it and the run's later "
            f"{event.tool} calls; anything else denies it, with that as the reason:"
        )
    else:
        where = f" --address {args.address}"
        if args.namespace != "default":
            where += f" --namespace {args.namespace}"
        _say(
            f"decide with: starter.py approve-call {workflow_id} {event.call_id}{where} "
            f"[--remember], or starter.py deny-call {workflow_id} {event.call_id}{where} "
            "--reason TEXT"
        )


async def _decide_call_at_terminal(agent_run: AgentRun, event: AgentEvent, line: str) -> None:
    """Enter or y approves, 'always' approves and remembers, anything else is a denial."""
    answer = line.strip()
    call_id = event.call_id or ""
    try:
        if answer.lower() in (*APPROVALS, "always"):
            remember = answer.lower() == "always"
            await agent_run.decide_tool_call(call_id, approve=True, remember=remember)
            _say(f"tool call {call_id} approved" + (" (and later calls)" if remember else ""))
        else:
            await agent_run.decide_tool_call(call_id, approve=False, reason=answer)
            _say(f"tool call {call_id} denied; the model is told why")
    except WorkflowUpdateFailedError as refused:
        _say(f"tool call {call_id} was not decided here: {_refusal(refused)}")
    except RPCError as error:
        _say(f"tool call {call_id} was not decided here: {_one_line(error)}")


async def _decide_at_terminal(agent_run: AgentRun, plan: PlanState, line: str) -> None:
    """Send the answer read for one plan: an empty line or y approves, anything else rejects."""
    answer = line.strip()
    try:
        if answer.lower() in APPROVALS:
            await agent_run.approve_plan(version=plan.version)
            _say(f"plan v{plan.version} approved")
        else:
            await agent_run.reject_plan(answer, version=plan.version)
            _say(f"plan v{plan.version} rejected; the model plans again")
    except WorkflowUpdateFailedError as refused:
        # Decided meanwhile elsewhere (the Web UI, `starter.py approve`): the run says why.
        _say(f"plan v{plan.version} was not decided here: {_refusal(refused)}")
    except RPCError as error:  # the run has ended meanwhile; its result says how
        _say(f"plan v{plan.version} was not decided here: {_one_line(error)}")


async def _read_line(stop: asyncio.Event) -> str | None:
    """One line of stdin, None at its end (or once `stop` is set), without blocking the loop.

    Read in a daemon thread from the unbuffered stream: `asyncio.to_thread(input)` would keep
    the process from exiting while the read is pending (the executor's threads are joined at
    exit, and a daemon thread inside the buffered reader's lock aborts the interpreter), and the
    run can end, or Ctrl-C come, while the question waits.
    """
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str | None] = loop.create_future()

    def settle(line: str | None) -> None:
        if not answered.done():
            answered.set_result(line)

    def read() -> None:
        stdin = sys.stdin
        try:
            # Unbuffered, so the thread never holds the buffered reader's lock.
            raw = getattr(stdin.buffer, "raw", stdin.buffer) if stdin is not None else None
            data = raw.readline() if raw is not None else b""
            line = data.decode(stdin.encoding or "utf-8", errors="replace") if data else None
        except (AttributeError, OSError, ValueError):
            line = None
        # The loop may have closed meanwhile: then nobody waits for the answer any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, line)

    threading.Thread(target=read, name="stdin-reader", daemon=True).start()
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({answered, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    return answered.result() if answered.done() else None


async def run_subcommand(args: Any) -> int:
    try:
        client = await AgentClient.connect(args.address, namespace=args.namespace)
    except RuntimeError as error:
        message = f"cannot connect to Temporal at {args.address}: {error}"
        _say(message)
        if args.json and args.command == "result":
            _print_json(
                args.workflow_id,
                "failed",
                error={"type": "ConnectionError", "message": message},
                trace=_traced(args, []),
            )
        return 1
    try:
        match args.command:
            case "approve" | "reject":
                return await _decide(client.run(args.workflow_id), args)
            case "approve-call" | "deny-call":
                return await _decide_call(client.run(args.workflow_id), args)
            case "calls":
                return await _list_calls(client.run(args.workflow_id), args)
            case "watch":
                return await _watch_command(client.run(args.workflow_id), args)
            case "status":
                status = await client.run(args.workflow_id).status()
                print(
                    json.dumps({"workflow_id": args.workflow_id, **status.model_dump(mode="json")})
                )
                return 0
            case "list":
                return await _list_waiting(client, args)
            case "result":
                return await _follow(client.run(args.workflow_id), args, ask=False)
            case "trace":
                records = await client.run(args.workflow_id).trace()
                if args.json:
                    print(
                        json.dumps(
                            {
                                "workflow_id": args.workflow_id,
                                "trace": [r.model_dump(mode="json") for r in records],
                            }
                        )
                    )
                else:
                    print(trace_table(records))
                return 0
            case "stats":
                return await _stats(client, args)
    except (RPCError, WorkflowQueryFailedError) as error:
        target = " ".join([args.command, *([args.workflow_id] if "workflow_id" in args else [])])
        _say(f"{target}: {_one_line(error)}")
        return 1
    raise AssertionError(f"unknown command {args.command}")


async def _decide(agent_run: AgentRun, args: Any) -> int:
    """approve/reject through the decide_plan update, so a refusal comes back with its reason."""
    try:
        if args.command == "approve":
            plan = await agent_run.approve_plan(args.comment, version=args.version)
        else:
            plan = await agent_run.reject_plan(args.feedback, version=args.version)
    except WorkflowUpdateFailedError as refused:
        _say(f"cannot {args.command} the plan of {agent_run.id}: {_refusal(refused)}")
        return 1
    if args.json:
        print(json.dumps({"workflow_id": agent_run.id, "plan": plan.model_dump(mode="json")}))
    else:
        print(f"{agent_run.id}: plan v{plan.version} {plan.status}")
    return 0


async def _decide_call(agent_run: AgentRun, args: Any) -> int:
    approve = args.command == "approve-call"
    try:
        decided = await agent_run.decide_tool_call(
            args.call_id, approve, args.reason, remember=args.remember
        )
    except WorkflowUpdateFailedError as refused:
        verb = "approve" if approve else "deny"
        _say(f"cannot {verb} {args.call_id} of {agent_run.id}: {_refusal(refused)}")
        return 1
    if args.json:
        print(json.dumps({"workflow_id": agent_run.id, "call": decided.model_dump(mode="json")}))
    else:
        print(f"{agent_run.id}: {decided.call_id} ({decided.tool}) {decided.status}")
    return 0


async def _list_calls(agent_run: AgentRun, args: Any) -> int:
    calls = await agent_run.pending_tool_calls()
    if args.json:
        print(json.dumps([c.model_dump(mode="json") for c in calls]))
        return 0
    for waiting in calls:
        print(f"{waiting.call_id}  step {waiting.step}  {waiting.tool} {waiting.arguments}")
    if not calls:
        _say(f"no tool call of {agent_run.id} waits for a decision")
    return 0


async def _watch_command(agent_run: AgentRun, args: Any) -> int:
    """Print each event as it comes; 0 when the run completed, 1 when it ended otherwise."""
    last: AgentEvent | None = None
    async for item in agent_run.events(args.from_offset):
        last = item.data
        if args.json:
            print(json.dumps({"offset": item.offset, **last.model_dump(mode="json")}), flush=True)
        else:
            print(f"{item.offset:>5}  {event_line(last)}", flush=True)
    return 0 if last is not None and last.kind == "completed" else 1


def event_line(event: AgentEvent) -> str:
    """One progress event as a line for people."""
    head = f"step {event.step} {event.kind.replace('_', ' ')}"
    call = f" {event.tool} {event.call_id}" if event.tool else ""
    match event.kind:
        case "step_started":
            return f"{head}: {event.model}"
        case "step_finished":
            usage = _usage_text(event.usage) if event.usage else ""
            calls = f"; calls {event.text}" if event.text else "; answered"
            return f"{head}: {event.model} {event.latency_ms} ms, {usage}{calls}"
        case "tool_call_started" | "approval_requested":
            return f"{head}:{call} {shorten(event.arguments or '', 200)}"
        case "tool_call_finished":
            error = f": {event.text}" if event.text else ""
            return f"{head}:{call} {event.outcome} in {event.latency_ms} ms{error}"
        case "approval_decided" | "compensation":
            reason = f" ({event.text})" if event.text else ""
            return f"{head}:{call} {event.outcome}{reason}"
        case "completed":
            return f"{head}: {shorten(event.text or '', 300)}"
        case _:
            detail = " ".join(part for part in (event.outcome, event.text) if part)
            return f"{head}: {shorten(detail, 300)}" if detail else head


async def _list_waiting(client: AgentClient, args: Any) -> int:
    """One line (or JSON object) per run that waits for a person, with its plan or its tool
    calls from its status query."""
    rows: list[dict[str, Any]] = []
    async for agent_run in client.awaiting_approval():
        row: dict[str, Any] = {
            "workflow_id": agent_run.id,
            "plan": None,
            "calls": [],
            "error": None,
        }
        try:
            status = await asyncio.wait_for(agent_run.status(), LIST_QUERY_TIMEOUT_SECONDS)
        except (RPCError, WorkflowQueryFailedError, TimeoutError) as error:
            row["error"] = _one_line(error) or "no worker answered the status query"
        else:
            plan = (
                status.plan if status.plan and status.plan.status == "awaiting_approval" else None
            )
            if status.status != "awaiting_approval" or (plan is None and not status.approvals):
                continue  # decided since the list was indexed
            row["plan"] = plan.model_dump(mode="json") if plan else None
            row["calls"] = [c.model_dump(mode="json") for c in status.approvals]
        rows.append(row)
    if args.json:
        print(json.dumps(rows))
        return 0
    for row in rows:
        plan = row["plan"]
        if row["error"] is not None:
            print(f"{row['workflow_id']}  unknown: {row['error']}")
        if plan is not None:
            print(f"{row['workflow_id']}  plan v{plan['version']}: " + " | ".join(plan["steps"]))
        for waiting in row["calls"]:
            print(
                f"{row['workflow_id']}  tool call {waiting['call_id']}: "
                f"{waiting['tool']} {waiting['arguments']}"
            )
    if not rows:
        _say("no run is waiting for approval")
    return 0


def _refusal(refused: WorkflowUpdateFailedError) -> str:
    cause = refused.cause
    return _one_line(cause) or type(cause).__name__


def _one_line(error: BaseException) -> str:
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else ""


def _print_steps(records: list[StepRecord], since: int) -> None:
    for record in records[since:]:
        tools = ", ".join(f"{c.name} {c.latency_ms} ms ({c.outcome})" for c in record.tool_calls)
        _say(
            f"step {record.step}: model {record.model_latency_ms} ms, {_usage_text(record.usage)}"
            + (f"; tools: {tools}" if tools else "; answered")
        )


def _usage_text(usage: Usage) -> str:
    cached = f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""
    cost = "" if usage.cost_usd is None else f", ${usage.cost_usd:.4f}"
    return f"{usage.input_tokens} in{cached} / {usage.output_tokens} out{cost}"


async def _stats(client: AgentClient, args: Any) -> int:
    """Read the runs that ended, group them by label, print each group's statistics."""
    completed: defaultdict[str, list[AgentResult]] = defaultdict(list)
    failed: Counter[str] = Counter()
    unreadable = 0
    async for closed in client.closed_runs(args.limit, label=args.label):
        group = closed.label if closed.label is not None else NO_LABEL
        if closed.result is not None:
            completed[group].append(closed.result)
        elif closed.failure is not None:
            failed[group] += 1
        else:
            unreadable += 1
            _say(f"{closed.workflow_id}: its outcome could not be read: {closed.error}")
    groups = [
        step_stats(label, completed[label], failed[label])
        for label in sorted({*completed, *failed}, key=lambda g: (g == NO_LABEL, g))
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "label": args.label,
                    "limit": args.limit,
                    "unreadable": unreadable,
                    "groups": [dataclasses.asdict(g) for g in groups],
                }
            )
        )
        return 0
    if not groups:
        where = f" with label {args.label!r}" if args.label is not None else ""
        _say(f"no agent run{where} has completed or failed yet")
        return 0
    print(stats_table(groups))
    return 0


def _report_failure(failure: AgentRunFailed, lines: _StepLines, args: Any) -> int:
    details = failure.details
    lines.show(details.step_records)
    _say(str(failure))
    if args.json:
        _print_json(
            failure.workflow_id,
            "failed",
            steps=details.steps,
            usage=details.usage,
            error={"type": failure.type, "message": failure.message},
            compensations=details.compensations,
            trace=_traced(args, details.step_records),
        )
    elif args.trace:
        _say(trace_table(details.step_records))
    return 1


def _traced(args: Any, records: Sequence[StepRecord]) -> Sequence[StepRecord] | None:
    """The `trace` of the JSON object: the records with --trace, else no such key."""
    return records if getattr(args, "trace", False) else None


def _print_json(
    workflow_id: str | None,
    status: str,
    *,
    answer: str | None = None,
    steps: int = 0,
    usage: Usage | None = None,
    error: dict[str, str] | None = None,
    compensations: Sequence[CompensationRecord] = (),
    trace: Sequence[StepRecord] | None = None,
) -> None:
    """One JSON object on stdout. `compensations` lists the undos that ran, in their order;
    `not_undone` the side effects that have no compensation; `trace`, when asked for, the step
    records."""
    print(
        json.dumps(
            {
                "workflow_id": workflow_id,
                "status": status,
                "answer": answer,
                "steps": steps,
                "usage": (usage or Usage()).model_dump(),
                "error": error,
                "compensations": [
                    {"tool": c.tool, "tool_call_id": c.tool_call_id, "status": c.status}
                    for c in compensations
                    if c.status != "not_undone"
                ],
                "not_undone": [
                    {"tool": c.tool, "tool_call_id": c.tool_call_id}
                    for c in compensations
                    if c.status == "not_undone"
                ],
                **({} if trace is None else {"trace": [r.model_dump(mode="json") for r in trace]}),
            }
        )
    )


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_command_line(argv)
    except CommandLineError as stop:
        return int(stop.code or 2)
    try:
        return asyncio.run(dispatch(args))
    except KeyboardInterrupt:
        _say("interrupted")
        return 130


def console_main() -> None:
    """The `durable-agent` console script that an installed project puts on the PATH."""
    exit_now(main())


if __name__ == "__main__":
    console_main()
