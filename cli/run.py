"""Starting a run and following it to its end: the one place that reports a run's outcome.

Without an address a run is self-contained: an embedded dev server (with the Web UI) and an
in-process worker live as long as this process, so a plan or a tool call that waits is asked at
this terminal. With an address the run is only started here (a worker elsewhere serves it) and
what waits is shown with the subcommands that decide it. Either way, and for `result`, the run
is followed the same way: a line per finished step on stderr, then the answer on stdout (or one
JSON object with --json), and exit status 0 for an answer, 1 for anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
import uuid
from typing import Any

import click
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from ..activities import telemetry
from ..activities.mcp_tools import McpTools
from ..client.agent_client import (
    AgentClient,
    AgentRun,
    AgentRunFailed,
    SearchAttributesNotRegistered,
)
from ..demo import script as demo
from ..serving.command_line import for_stdout, say
from ..serving.self_contained import self_contained
from ..serving.worker import SETUP_ERRORS, check_worker, setup_error
from ..workflows.input_limits import InputTooLarge, check_input, json_bytes
from ..workflows.inputs import AgentInput, AgentResult, CodeMode, Limits, ToolApprovalPolicy
from ..workflows.model_settings import ModelSettings
from ..workflows.state import FailureDetails
from ..workflows.usage import Usage
from . import conversation, decide
from .args import Following, RunArgs, program, subcommand
from .tables import DeltaLines, StepLines, trace_table, usage_text
from .terminal import answers, chat, keyboard

CANCEL_WAIT_SECONDS = 10.0
WATCHER_STOP_SECONDS = 10.0


def build_input(args: RunArgs) -> AgentInput:
    model = args.model
    if model.provider == "scripted" and args.script is not None:  # no price: a user's script
        model = ModelSettings(provider="scripted", model=model.model, script=list(args.script))
    elif model.provider == "scripted":
        model = demo.demo_model(model.model, plan=args.plan, conversation=args.conversation)
    return AgentInput(
        prompt=args.prompt,
        conversation=args.conversation,
        system=args.system or (demo.SUPPORT_DEMO_SYSTEM if is_demo(args) else None),
        tools=list(args.offered_tools) or None,
        model=model,
        limits=Limits(max_steps=args.max_steps, max_cost_usd=args.max_cost_usd),
        plan=args.plan,
        code_mode=CodeMode() if args.code_mode else None,
        guardrails=args.guardrails,
        label=args.label,
        tool_approval=ToolApprovalPolicy(approve_all=args.approve_all, allow=list(args.allow)),
    )


def is_demo(args: RunArgs) -> bool:
    """A run of the demo, which alone gets the demo shop's system prompt when --system is not
    given: a self-contained run on the demo's tools (no --tools), or the scripted demo's own
    conversation (the scripted provider without --script), which calls them. Any other run,
    against a user's worker (--address) above all, has no system prompt unless given one."""
    plays_the_demo = args.model.provider == "scripted" and args.script is None
    return (args.address is None and not args.tools) or plays_the_demo


async def run(args: RunArgs) -> int:
    """Start the run (on an embedded server without --address) and follow it to its end, traced
    as the OTEL_* variables say (flushed before returning: the CLI exits with os._exit)."""
    try:
        tracing = telemetry.configure_from_env()
    except telemetry.TelemetryConfigurationError as error:
        say(f"{program()}: error: {error}")
        return 2
    try:
        return await _run(args)
    finally:
        if tracing and not telemetry.flush():
            say("tracing: some spans were not exported in time")


async def _run(args: RunArgs) -> int:
    if args.chat and not args.prompt.strip():
        first = await chat.first_message()
        if first is None:
            say(f"{program()} chat: no first message")
            return 2
        args = dataclasses.replace(args, prompt=first)
    agent_input = build_input(args)
    try:  # before a server starts: the run could not start with it
        check_input(json_bytes(agent_input), len(agent_input.prompt))
    except InputTooLarge as refused:
        say(f"{program()}: error: {refused}")
        return 2
    if args.print_input:  # for a client in another language (docs/contract.md)
        print(agent_input.model_dump_json())
        return 0
    shown = {key: getattr(args, key) for key in ("json", "trace", "address", "namespace", "stream")}
    following = Following(ask=args.address is None, **shown)
    if args.model.provider == "scripted" and args.script is None and not args.json:
        plan = "; its plan expects to be approved" if args.plan else ""
        say(
            f"scripted model: it replays the seeds' support conversation whatever the prompt"
            f"{plan}; its price is made up, to show cost; set OPENAI_API_KEY or "
            "ANTHROPIC_API_KEY for a real model"
        )
    if args.address is not None:
        try:
            client = await AgentClient.connect(
                args.address, namespace=args.namespace, task_queue=args.task_queue
            )
        except RuntimeError as error:
            return unreachable(args.address, error, None, following)
        return await _start(client, agent_input, args, following)
    try:
        check_worker(args.tools)
    except SETUP_ERRORS as error:
        say(f"{program()}: error: {setup_error(error)}")
        return 2
    mcp = McpTools(args.mcp_config) if args.mcp_config is not None else None
    # A conversation takes Ctrl-C as an interrupt: its server must not get the terminal's SIGINT.
    async with self_contained(args.task_queue, detached=args.conversation, mcp=mcp) as backend:
        say(f"embedded Temporal dev server; Web UI: {backend.web_ui}")
        status = await _start(backend.agents, agent_input, args, following)
        if args.linger:
            say(f"the run is in the Web UI at {backend.web_ui}; Ctrl-C to stop")
            stop, loop = asyncio.Event(), asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stop.set)
            await stop.wait()
        return status


def unreachable(
    address: str, error: BaseException, workflow_id: str | None, following: Following | None
) -> int:
    message = f"cannot connect to Temporal at {address}: {error}"
    return failed(following, workflow_id, "ConnectionError", message)


async def _start(
    client: AgentClient, agent_input: AgentInput, args: RunArgs, following: Following
) -> int:
    workflow_id = f"agent-{uuid.uuid4().hex[:12]}"
    try:
        agent_run = await client.start(agent_input, workflow_id=workflow_id)
    except (RPCError, SearchAttributesNotRegistered) as error:
        return failed(following, workflow_id, "StartError", f"could not start the run: {error}")
    if args.no_wait:
        print_run_json(following, workflow_id, "running")
        if not args.json:
            print(workflow_id)
        return 0
    if not args.json:
        say(f"workflow {workflow_id} started")
    if args.conversation and (args.chat or following.ask):
        # Self-contained, nothing else can send the next message: the conversation is here.
        return await chat.chat(agent_run, following)
    if args.conversation:
        return await conversation.converse(agent_run, following)
    return await follow(agent_run, following)


@subcommand()
@click.option("--trace", is_flag=True, help="then print its steps as a table on stderr")
async def result(agent_run: AgentRun, following: Following, trace: bool) -> int:
    """Wait for the run's answer and print it like a run started here."""
    return await follow(agent_run, dataclasses.replace(following, trace=trace))


async def follow(agent_run: AgentRun, following: Following) -> int:
    """Wait for the run's end, printing its steps and its plans; print the outcome."""
    deltas = DeltaLines()
    lines = StepLines(before=deltas.end)
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch(agent_run, lines, stop, following))
    outcome = asyncio.create_task(agent_run.result())
    printer = asyncio.create_task(print_deltas(agent_run, deltas)) if following.stream else None
    try:
        await asyncio.wait({watcher, outcome}, return_when=asyncio.FIRST_COMPLETED)
        if not outcome.done():
            # The progress lines may stop early (a stream that cannot be read is not fatal);
            # only a question left undecided at the terminal ends the wait.
            undecided = None if watcher.exception() else watcher.result()
            if undecided is not None:
                return await _no_decision(agent_run, undecided, outcome, following)
            await asyncio.wait({outcome})
    finally:
        # Let the watcher finish the call it is making rather than cancel it half-way.
        stop.set()
        await asyncio.wait({watcher}, timeout=WATCHER_STOP_SECONDS)
        tasks = [watcher, outcome, *([printer] if printer is not None else [])]
        for task in tasks:
            task.cancel()  # nothing happens to a task that is done
        await asyncio.gather(*tasks, return_exceptions=True)
    try:
        result = outcome.result()
    except AgentRunFailed as failure:
        details = failure.details
        lines.show(details.step_records)
        say(str(failure))
        if following.trace and not following.json:
            say(trace_table(details.step_records, earlier=details.earlier_steps))
        error = (failure.type, failure.message)
        print_run_json(following, failure.workflow_id, "failed", error, details)
        return 1
    except RPCError as error:
        return failed(following, agent_run.id, "RPCError", f"run {agent_run.id}: {error.message}")
    lines.show(result.step_records)
    if not following.json:
        print(for_stdout(result.answer))
        say(f"{result.steps} steps, {usage_text(result.usage)}")
        if following.trace:
            earlier, compactions = result.earlier_steps, result.compactions
            say(trace_table(result.step_records, compactions=compactions, earlier=earlier))
    print_run_json(following, agent_run.id, "completed", spent=result)
    return 0


async def print_deltas(agent_run: AgentRun, lines: DeltaLines) -> None:
    """The model's text on stderr as it is written; a failed attempt's is marked void."""
    with contextlib.suppress(RPCError):
        async for delta in agent_run.deltas():
            lines.show(delta)
    lines.end()


async def _watch(
    agent_run: AgentRun, lines: StepLines, stop: asyncio.Event, following: Following
) -> str | None:
    """Follow the run's progress stream to its end: one line per finished step, and each plan
    and tool call that waits for a person, once. When `following.ask`, the question is put
    here; returns what was left undecided when stdin ended, else None."""
    async for item in agent_run.events():
        lines.add(item.data)
        question = await decide.shown(agent_run, item.data, following, ask=following.ask)
        if question is None or not following.ask:
            continue
        line = await answers.ask(agent_run, question, keyboard.stdin().next(stop))
        if stop.is_set():
            break
        if line is None:
            return str(question)
    return None


async def _no_decision(
    agent_run: AgentRun, undecided: str, outcome: asyncio.Task[Any], following: Following
) -> int:
    """stdin ended with a question undecided (asked only when self-contained)."""
    message = (
        f"stdin ended before a decision on {undecided} of {agent_run.id}; nothing here can "
        "decide it (run at a terminal, or use --address and the approve subcommands)"
    )
    say(message)
    spent = FailureDetails(steps=0, usage=Usage())
    with contextlib.suppress(RPCError, WorkflowQueryFailedError):
        last = await agent_run.status()
        spent = FailureDetails(steps=last.step, usage=last.usage, step_records=last.step_records)
    # The run cannot outlive this process's server: cancel it, so that it ends as a run, not as
    # a workflow torn down mid-wait, and let the wait for its result end with it.
    with contextlib.suppress(RPCError):
        await agent_run.handle.cancel()
        await asyncio.wait({outcome}, timeout=CANCEL_WAIT_SECONDS)
    if following.trace and not following.json:
        say(trace_table(spent.step_records))
    print_run_json(following, agent_run.id, "failed", ("NoDecision", message), spent)
    return 1


def failed(following: Following | None, workflow_id: str | None, kind: str, message: str) -> int:
    """A run that could not be followed: one line, and the run's JSON object when one is due."""
    say(message)
    print_run_json(following, workflow_id, "failed", (kind, message))
    return 1


def print_run_json(
    following: Following | None,
    workflow_id: str | None,
    status: str,
    error: tuple[str, str] | None = None,
    spent: AgentResult | FailureDetails | None = None,
) -> None:
    """With --json, a run's one JSON object on stdout: its `error` (type, message), what it
    `spent`; `compensations` the undos that ran, in their order, `not_undone` the side effects
    that have no compensation; with --trace, `trace` the step records."""
    if following is None or not following.json:
        return
    spent = spent or FailureDetails(steps=0, usage=Usage())
    undone = spent.compensations if isinstance(spent, FailureDetails) else []
    done = [c for c in undone if c.status != "not_undone"]
    outcome = {
        "workflow_id": workflow_id,
        "status": status,
        "answer": spent.answer if isinstance(spent, AgentResult) else None,
        "steps": spent.steps,
        "usage": spent.usage.model_dump(),
        "error": None if error is None else dict(zip(("type", "message"), error, strict=True)),
        "compensations": [c.model_dump(include={"tool", "tool_call_id", "status"}) for c in done],
        "not_undone": [
            c.model_dump(include={"tool", "tool_call_id"}) for c in undone if c not in done
        ],
    }
    if following.trace:
        outcome["trace"] = [r.model_dump(mode="json") for r in spent.step_records]
    print(json.dumps(outcome))
