"""A plan or a tool call that waits for a person, and the person's decision: asked at the
terminal while a self-contained run is followed (Enter or y approves; for a plan anything else
is feedback, for a call 'always' also approves the tool's later calls and anything else is the
reason for a denial), or sent by a subcommand (approve, reject, approve-call, deny-call).

Every decision goes through the run's update, so a refusal (decided meanwhile elsewhere, a
version that is not the one waiting, an unknown call) comes back with the run's reason, in one
line. A decision that did not go through is reported and the run goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, ClassVar

import click
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from ..client.agent_client import AgentRun, AgentUpdateNotDelivered
from ..serving.command_line import one_line, refuse, say
from ..workflows.events import AgentEvent
from ..workflows.input_limits import TOO_LARGE, check_comment, check_reason
from ..workflows.state import AutoRules, PlanState, ToolApproval
from .args import FILE, POSITIVE, Following, Text, argument, program, read_rules, subcommand

APPROVALS = ("", "y", "yes")


@dataclass(frozen=True)
class PlanQuestion:
    plan: PlanState

    def __str__(self) -> str:
        return f"plan v{self.plan.version}"


@dataclass(frozen=True)
class CallQuestion:
    """A tool call that waits (its `approval_requested` event)."""

    event: AgentEvent

    @property
    def call_id(self) -> str:
        return self.event.call_id or ""

    def __str__(self) -> str:
        return f"tool call {self.event.call_id} ({self.event.tool})"


Question = PlanQuestion | CallQuestion


async def question_in(agent_run: AgentRun, event: AgentEvent) -> Question | None:
    """What `event` asks of a person, if it still waits: a submitted plan is looked up in the
    run's status, since it may have been decided elsewhere already."""
    if event.kind == "plan_submitted":
        plan = (await agent_run.status()).plan
        return PlanQuestion(plan) if plan and plan.status == "awaiting_approval" else None
    return CallQuestion(event) if event.kind == "approval_requested" else None


def show(workflow_id: str, question: Question, following: Following, *, ask: bool) -> None:
    """The question on stderr, then either how to answer it here (`ask`) or the subcommands
    that decide it from elsewhere, with this server's flags."""
    where = f" --address {following.address}"
    if following.namespace != "default":
        where += f" --namespace {following.namespace}"
    match question:
        case PlanQuestion(plan):
            say(f"plan v{plan.version} of {workflow_id} waits for approval:")
            for number, step in enumerate(plan.steps, start=1):
                say(f"  {number}. {step}")
            how = f"approve {workflow_id}{where} [--comment TEXT], or {program()} reject "
            how += f"{workflow_id}{where} --feedback TEXT"
            asking = "Approve it? Enter (or y) approves; anything else is your feedback, to plan"
            asking += " again:"
        case CallQuestion(event):
            asker = sub_agent_of(workflow_id, question.call_id)
            by = f" (sub-agent {asker})" if asker else ""
            say(
                f"tool call {event.call_id} of {workflow_id} waits for approval{by}: "
                f"{event.tool} {event.arguments}"
            )
            call = f"{workflow_id} {event.call_id}{where}"
            how = f"approve-call {call} [--remember], or {program()} deny-call {call} --reason TEXT"
            asking = "Run it? Enter (or y) approves; 'always' approves it and the run's later "
            asking += f"{event.tool} calls; anything else denies it, with that as the reason:"
    say(asking if ask else f"decide with: {program()} {how}")


async def answer(agent_run: AgentRun, question: Question, line: str) -> None:
    """Send the decision read at the terminal for `question`."""
    reply = line.strip()
    subject = str(question)
    try:
        match question:
            case PlanQuestion(plan) if reply.lower() in APPROVALS:
                await agent_run.approve_plan(version=plan.version)
                say(f"{question} approved")
            case PlanQuestion(plan):
                await agent_run.reject_plan(reply, version=plan.version)
                say(f"{question} rejected; the model plans again")
            case CallQuestion(call_id=call_id) if reply.lower() in (*APPROVALS, "always"):
                subject = f"tool call {call_id}"
                remember = reply.lower() == "always"
                await agent_run.decide_tool_call(call_id, approve=True, remember=remember)
                say(f"{subject} approved" + (" (and later calls)" if remember else ""))
            case CallQuestion(call_id=call_id):
                subject = f"tool call {call_id}"
                await agent_run.decide_tool_call(call_id, approve=False, reason=reply)
                say(f"{subject} denied; the model is told why")
    # Decided meanwhile elsewhere (the Web UI, a subcommand): the run says why; or it has ended
    # (its result says how), or its server would not take the decision (the line says why).
    except (WorkflowUpdateFailedError, RPCError, AgentUpdateNotDelivered) as error:
        say(f"{subject} was not decided here: {refusal(error)}")


def sub_agent_of(workflow_id: str, call_id: str) -> str | None:
    """The sub-agent run that asked, for a call id qualified by the delegate call that started
    it (`call_1_1/call_2_1`: the sub-agent `<workflow_id>/call_1_1`); None for the run's own."""
    delegates, _, _ = call_id.rpartition("/")
    return f"{workflow_id}/{delegates}" if delegates else None


class Lines:
    """Standard input, line by line, without blocking the loop; None at its end. Read in a
    daemon thread from the unbuffered stream, so that a line can come while a turn works or a
    question waits, and the process can exit while a read is pending: `asyncio.to_thread(input)`
    would keep it (the executor's threads are joined at exit, and a daemon thread inside the
    buffered reader's lock aborts the interpreter). One reader for the process: `stdin()`."""

    shared: ClassVar[Lines | None] = None

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def read() -> None:
            stdin = sys.stdin
            raw = getattr(stdin.buffer, "raw", stdin.buffer) if stdin is not None else None
            line: str | None = ""
            while line is not None:
                try:
                    data = raw.readline() if raw is not None else b""
                except (AttributeError, OSError, ValueError):
                    data = b""
                line = data.decode(stdin.encoding or "utf-8", errors="replace") if data else None
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(self._queue.put_nowait, line)

        threading.Thread(target=read, name="stdin-lines", daemon=True).start()

    async def next(self, stop: asyncio.Event | None = None) -> str | None:
        """The next line; None at the end of stdin (for every later call too), or once `stop`
        is set."""
        if stop is None:
            line = await self._queue.get()
        else:
            getting = asyncio.ensure_future(self._queue.get())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not getting.done():
                getting.cancel()
                return None
            line = getting.result()
        if line is None:
            self._queue.put_nowait(None)
        return line


def stdin() -> Lines:
    """The process's reader of standard input."""
    Lines.shared = Lines.shared or Lines()
    return Lines.shared


VERSION = click.option("--version", type=POSITIVE, help="decide only if plan version N waits")
CALL_ID = argument("call_id", "the call id", type=Text())
REMEMBER = click.option("--remember", is_flag=True, help="decide the tool's later calls too")


@subcommand("Approve the plan a run waits with.")
@click.option("--comment", type=Text(None, check_comment), help="a note for the model")
@VERSION
async def approve(
    run: AgentRun, following: Following, comment: str | None, version: int | None
) -> int:
    decision = run.approve_plan(comment, version=version)
    return await _decide(run, following, "approve the plan", decision, "plan")


@subcommand("Reject the plan a run waits with; the model plans again.")
@click.option(
    "--feedback",
    type=Text(": the model needs to know what to change", check_comment),
    required=True,
    help="what the model should change",
)
@VERSION
async def reject(run: AgentRun, following: Following, feedback: str, version: int | None) -> int:
    decision = run.reject_plan(feedback, version=version)
    return await _decide(run, following, "reject the plan", decision, "plan")


@subcommand("Let a tool call that waits for a person run.")
@CALL_ID
@REMEMBER
@click.option("--reason", type=Text(None, check_reason), help="a note kept with the decision")
async def approve_call(
    run: AgentRun, following: Following, call_id: str, remember: bool, reason: str | None
) -> int:
    decision = run.decide_tool_call(call_id, True, reason, remember=remember)
    return await _decide(run, following, f"approve {call_id}", decision, "call")


@subcommand("Deny a tool call that waits; the model gets the reason as its result.")
@CALL_ID
@REMEMBER
@click.option(
    "--reason",
    type=Text(": the model needs to know why", check_reason),
    required=True,
    help="what the model is told",
)
async def deny_call(
    run: AgentRun, following: Following, call_id: str, remember: bool, reason: str
) -> int:
    decision = run.decide_tool_call(call_id, False, reason, remember=remember)
    return await _decide(run, following, f"deny {call_id}", decision, "call")


class JsonText(click.ParamType):
    """A JSON value given on the command line."""

    name = "JSON"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as error:
            self.fail(f"not JSON: {error}", param, ctx)


@subcommand(
    "Answer a callback tool's call that waits (`callbacks` lists them) with the result the "
    "client computed, as JSON; refused, with the reason, when it does not match the tool's "
    "result schema."
)
@CALL_ID
@click.option("--result", type=JsonText(), required=True, help="the result, as JSON")
async def answer_callback(run: AgentRun, following: Following, call_id: str, result: Any) -> int:
    try:
        answered = await run.answer_callback(call_id, result)
    except WorkflowUpdateFailedError as refused:
        say(f"cannot answer {call_id} of {run.id}: {refusal(refused)}")
        return 1
    if following.json:
        print(json.dumps({"workflow_id": run.id, "callback": answered.model_dump(mode="json")}))
    else:
        print(f"{run.id}: {answered.call_id} ({answered.tool}) answered")
    return 0


def _one_change(options: dict[str, Any]) -> None:
    if options["off"] == (options["rules"] is not None):
        refuse("auto-mode takes --off or --rules FILE, one of them")
    if options["rules"] is not None:
        options["rules"] = read_rules(options["rules"])


@subcommand(
    "For an operator: turn auto mode's judge off for the rest of the run (--off), or replace its "
    "rules (--rules FILE: JSON of criteria, tools and default; the judge stays). Calls the judge "
    "is reviewing go to a person.",
    rules=_one_change,
)
@click.option("--off", is_flag=True, help="turn auto mode off for the rest of the run")
@click.option("--rules", type=FILE, help="replace the rules with this JSON file's")
async def auto_mode(run: AgentRun, following: Following, off: bool, rules: AutoRules | None) -> int:
    try:
        now = await run.set_auto_mode(off=off, rules=rules)
    except WorkflowUpdateFailedError as refused:
        say(f"cannot change auto mode of {run.id}: {refusal(refused)}")
        return 1
    if following.json:
        print(json.dumps({"workflow_id": run.id, "auto_mode": now}))
    else:
        print(f"{run.id}: {now}")
    return 0


async def _decide(
    run: AgentRun,
    following: Following,
    verb: str,
    decision: Awaitable[PlanState | ToolApproval],
    key: str,
) -> int:
    """0 once decided, 1 when the run refuses (it says why)."""
    try:
        decided = await decision
    except WorkflowUpdateFailedError as refused:
        say(f"cannot {verb} of {run.id}: {refusal(refused)}")
        return 1
    if following.json:
        print(json.dumps({"workflow_id": run.id, key: decided.model_dump(mode="json")}))
    elif isinstance(decided, PlanState):
        print(f"{run.id}: plan v{decided.version} {decided.status}")
    else:
        print(f"{run.id}: {decided.call_id} ({decided.tool}) {decided.status}")
    return 0


def too_large(refused: WorkflowUpdateFailedError) -> bool:
    """The run (or the client) refused an input over its bound (workflows/input_limits.py):
    a shorter one would be taken."""
    cause = refused.cause
    return isinstance(cause, ApplicationError) and cause.type == TOO_LARGE


def refusal(error: BaseException) -> str:
    """Why the run refused an update (or why it did not reach the run), in one line."""
    if isinstance(error, WorkflowUpdateFailedError):
        return one_line(error.cause) or type(error.cause).__name__
    return one_line(error)
