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
from typing import Any

import click
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from ..client.agent_client import AgentRun, AgentUpdateNotDelivered
from ..workflows.events import AgentEvent
from ..workflows.input_limits import TOO_LARGE, check_comment, check_reason
from ..workflows.state import PlanState
from .args import POSITIVE, Following, Text, argument, subcommand
from .plumbing import one_line, say

APPROVALS = ("", "y", "yes")


@dataclass(frozen=True)
class PlanQuestion:
    """A plan that waits for approval."""

    plan: PlanState

    def __str__(self) -> str:
        return f"plan v{self.plan.version}"


@dataclass(frozen=True)
class CallQuestion:
    """A tool call that waits for approval (an `approval_requested` event)."""

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
        if plan is None or plan.status != "awaiting_approval":
            return None
        return PlanQuestion(plan)
    if event.kind == "approval_requested":
        return CallQuestion(event)
    return None


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
            if ask:
                say(
                    "Approve it? Enter (or y) approves; anything else is your feedback, "
                    "to plan again:"
                )
            else:
                say(
                    f"decide with: starter.py approve {workflow_id}{where} [--comment TEXT], or "
                    f"starter.py reject {workflow_id}{where} --feedback TEXT"
                )
        case CallQuestion(event):
            asker = sub_agent_of(workflow_id, question.call_id)
            by = f" (sub-agent {asker})" if asker else ""
            say(
                f"tool call {event.call_id} of {workflow_id} waits for approval{by}: "
                f"{event.tool} {event.arguments}"
            )
            if ask:
                say(
                    f"Run it? Enter (or y) approves; 'always' approves it and the run's later "
                    f"{event.tool} calls; anything else denies it, with that as the reason:"
                )
            else:
                say(
                    f"decide with: starter.py approve-call {workflow_id} {event.call_id}{where} "
                    f"[--remember], or starter.py deny-call {workflow_id} {event.call_id}{where} "
                    "--reason TEXT"
                )


async def answer(agent_run: AgentRun, question: Question, line: str) -> None:
    """Send the decision read at the terminal for `question`."""
    reply = line.strip()
    try:
        match question:
            case PlanQuestion(plan):
                if reply.lower() in APPROVALS:
                    await agent_run.approve_plan(version=plan.version)
                    say(f"{question} approved")
                else:
                    await agent_run.reject_plan(reply, version=plan.version)
                    say(f"{question} rejected; the model plans again")
            case CallQuestion():
                call_id = question.call_id
                if reply.lower() in (*APPROVALS, "always"):
                    remember = reply.lower() == "always"
                    await agent_run.decide_tool_call(call_id, approve=True, remember=remember)
                    later = " (and later calls)" if remember else ""
                    say(f"tool call {call_id} approved{later}")
                else:
                    await agent_run.decide_tool_call(call_id, approve=False, reason=reply)
                    say(f"tool call {call_id} denied; the model is told why")
    except WorkflowUpdateFailedError as refused:
        # Decided meanwhile elsewhere (the Web UI, a subcommand): the run says why.
        say(f"{_subject(question)} was not decided here: {refusal(refused)}")
    # The run has ended meanwhile (its result says how), or its server would not take the
    # decision (the line says what to do).
    except (RPCError, AgentUpdateNotDelivered) as error:
        say(f"{_subject(question)} was not decided here: {one_line(error)}")


def sub_agent_of(workflow_id: str, call_id: str) -> str | None:
    """The sub-agent run that asked, for a call id qualified by the delegate call that started
    it (`call_1_1/call_2_1`: the sub-agent `<workflow_id>/call_1_1`); None for the run's own."""
    delegates, _, _ = call_id.rpartition("/")
    return f"{workflow_id}/{delegates}" if delegates else None


def _subject(question: Question) -> str:
    return str(question) if isinstance(question, PlanQuestion) else f"tool call {question.call_id}"


async def read_line(stop: asyncio.Event) -> str | None:
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


VERSION = click.option(
    "--version", type=POSITIVE, help="decide only if plan version N is the one waiting"
)
CALL_ID = argument("call_id", "the call id", type=Text())
REMEMBER = click.option("--remember", is_flag=True, help="decide the tool's later calls too")


@subcommand("Approve the plan a run waits with.")
@click.option("--comment", type=Text(None, check_comment), help="a note for the model")
@VERSION
async def approve(
    agent_run: AgentRun, following: Following, comment: str | None, version: int | None
) -> int:
    return await _plan(
        agent_run, following, "approve", agent_run.approve_plan(comment, version=version)
    )


@subcommand("Reject the plan a run waits with; the model plans again.")
@click.option(
    "--feedback",
    type=Text(": the model needs to know what to change", check_comment),
    required=True,
    help="what the model should change",
)
@VERSION
async def reject(
    agent_run: AgentRun, following: Following, feedback: str, version: int | None
) -> int:
    return await _plan(
        agent_run, following, "reject", agent_run.reject_plan(feedback, version=version)
    )


async def _plan(
    agent_run: AgentRun, following: Following, verb: str, decision: Awaitable[PlanState]
) -> int:
    """`approve` / `reject`: 0 once decided, 1 when the run refuses (it says why)."""
    try:
        plan = await decision
    except WorkflowUpdateFailedError as refused:
        say(f"cannot {verb} the plan of {agent_run.id}: {refusal(refused)}")
        return 1
    if following.json:
        print(json.dumps({"workflow_id": agent_run.id, "plan": plan.model_dump(mode="json")}))
    else:
        print(f"{agent_run.id}: plan v{plan.version} {plan.status}")
    return 0


@subcommand("Let a tool call that waits for a person run.")
@CALL_ID
@REMEMBER
@click.option("--reason", type=Text(None, check_reason), help="a note kept with the decision")
async def approve_call(
    agent_run: AgentRun, following: Following, call_id: str, remember: bool, reason: str | None
) -> int:
    return await _call(agent_run, following, call_id, True, reason, remember)


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
    agent_run: AgentRun, following: Following, call_id: str, remember: bool, reason: str
) -> int:
    return await _call(agent_run, following, call_id, False, reason, remember)


async def _call(
    agent_run: AgentRun,
    following: Following,
    call_id: str,
    approve: bool,
    reason: str | None,
    remember: bool,
) -> int:
    """`approve-call` / `deny-call`: 0 once decided, 1 when the run refuses (it says why)."""
    try:
        decided = await agent_run.decide_tool_call(call_id, approve, reason, remember=remember)
    except WorkflowUpdateFailedError as refused:
        verb = "approve" if approve else "deny"
        say(f"cannot {verb} {call_id} of {agent_run.id}: {refusal(refused)}")
        return 1
    if following.json:
        print(json.dumps({"workflow_id": agent_run.id, "call": decided.model_dump(mode="json")}))
    else:
        print(f"{agent_run.id}: {decided.call_id} ({decided.tool}) {decided.status}")
    return 0


def too_large(refused: WorkflowUpdateFailedError) -> bool:
    """The run (or the client) refused an input over its bound (workflows/input_limits.py):
    a shorter one would be taken."""
    cause = refused.cause
    return isinstance(cause, ApplicationError) and cause.type == TOO_LARGE


def refusal(refused: WorkflowUpdateFailedError) -> str:
    """Why the run refused an update, in one line."""
    cause = refused.cause
    return one_line(cause) or type(cause).__name__
