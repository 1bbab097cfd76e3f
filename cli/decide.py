"""A plan or a tool call that waits for a person: shown while a run is followed, with the
subcommands that decide it (approve, reject, approve-call, deny-call), or asked at this terminal
(terminal/answers.py reads the answer).

Every decision goes through the run's update, so a refusal (decided meanwhile elsewhere, a
version that is not the one waiting, an unknown call) comes back with the run's reason, in one
line. A decision that did not go through is reported and the run goes on."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from pydantic import TypeAdapter
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from ..client.agent_client import AgentRun
from ..serving.command_line import one_line, refuse, say, visible
from ..workflows.decisions import AutoRules, PlanState, ToolApproval
from ..workflows.events import AgentEvent
from ..workflows.input_limits import TOO_LARGE, check_comment, check_reason
from .args import FILE, POSITIVE, Following, Text, argument, program, read_json, subcommand

T = TypeVar("T")


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
        return f"tool call {visible(self.call_id)} ({self.event.tool})"


Question = PlanQuestion | CallQuestion


async def shown(
    agent_run: AgentRun, event: AgentEvent, following: Following, *, ask: bool
) -> Question | None:
    """What `event` asks of a person, if it still waits (a submitted plan is looked up in the
    run's status: it may have been decided elsewhere already; a call a remembered denial
    decides at once does not wait), shown: see `show`."""
    question: Question | None = None
    if event.kind == "plan_submitted":
        plan = (await agent_run.status()).plan
        question = PlanQuestion(plan) if plan and plan.status == "awaiting_approval" else None
    elif event.kind == "approval_requested" and event.outcome != "remembered":
        question = CallQuestion(event)
    if question is not None:
        show(agent_run.id, question, following, ask=ask)
    return question


def show(workflow_id: str, question: Question, following: Following, *, ask: bool) -> None:
    """The question on stderr, then, unless it is asked at this terminal (`ask`, which says how
    to answer it there), the subcommands that decide it from elsewhere, with this server's
    flags."""
    where = following.flags
    match question:
        case PlanQuestion(plan):
            say(f"plan v{plan.version} of {workflow_id} waits for approval:")
            for number, step in enumerate(plan.steps, start=1):
                say(f"  {number}. {visible(step)}")
            how = f"approve {workflow_id}{where} [--comment TEXT], or {program()} reject "
            how += f"{workflow_id}{where} --feedback TEXT"
        case CallQuestion(event):
            asker = sub_agent_of(workflow_id, question.call_id)
            by = f" (sub-agent {asker})" if asker else ""
            by += f" (in the script of {event.script})" if event.script else ""
            say(
                f"tool call {visible(question.call_id)} of {workflow_id} waits for approval{by}: "
                f"{event.tool} {event.arguments}"
            )
            call = f"{workflow_id} {event.call_id}{where}"
            how = f"approve-call {call} [--remember], or {program()} deny-call {call} --reason TEXT"
    if not ask:
        say(f"decide with: {program()} {how}")


def sub_agent_of(workflow_id: str, call_id: str) -> str | None:
    """The sub-agent run that asked, for a call id qualified by the delegate call that started
    it (`call_1_1/call_2_1`: the sub-agent `<workflow_id>/call_1_1`); None for the run's own."""
    delegates, _, _ = call_id.rpartition("/")
    return f"{workflow_id}/{delegates}" if delegates else None


VERSION = click.option("--version", type=POSITIVE, help="decide only if plan version N waits")
CALL_ID = argument("call_id", "the call id", type=Text())
REMEMBER = click.option("--remember", is_flag=True, help="decide the tool's later calls too")


@subcommand()
@click.option("--comment", type=Text(None, check_comment), help="a note for the model")
@VERSION
async def approve(
    run: AgentRun, following: Following, comment: str | None, version: int | None
) -> int:
    """Approve the plan a run waits with."""
    decision = run.approve_plan(comment, version=version)
    return await _decide(run, following, "approve the plan", decision)


@subcommand()
@click.option(
    "--feedback",
    type=Text(": the model needs to know what to change", check_comment),
    required=True,
    help="what the model should change",
)
@VERSION
async def reject(run: AgentRun, following: Following, feedback: str, version: int | None) -> int:
    """Reject the plan a run waits with; the model plans again."""
    decision = run.reject_plan(feedback, version=version)
    return await _decide(run, following, "reject the plan", decision)


@subcommand()
@CALL_ID
@REMEMBER
@click.option("--reason", type=Text(None, check_reason), help="a note kept with the decision")
async def approve_call(
    run: AgentRun, following: Following, call_id: str, remember: bool, reason: str | None
) -> int:
    """Let a tool call that waits for a person run."""
    decision = run.decide_tool_call(call_id, True, reason, remember=remember)
    return await _decide(run, following, f"approve {call_id}", decision)


@subcommand()
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
    """Deny a tool call that waits; the model gets the reason as its result."""
    decision = run.decide_tool_call(call_id, False, reason, remember=remember)
    return await _decide(run, following, f"deny {call_id}", decision)


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


@subcommand()
@CALL_ID
@click.option("--result", type=JsonText(), required=True, help="the result, as JSON")
async def answer_callback(run: AgentRun, following: Following, call_id: str, result: Any) -> int:
    """Answer a callback tool's call that waits (`callbacks` lists them) with the result the client
    computed, as JSON; refused, with the reason, when it does not match the tool's result schema."""
    answered = await sent(f"answer {call_id} of {run.id}", run.answer_callback(call_id, result))
    shown = f"{run.id}: {answered.call_id} ({answered.tool}) answered"
    following.answer({"workflow_id": run.id, "callback": answered.model_dump(mode="json")}, shown)
    return 0


def _one_change(options: dict[str, Any]) -> None:
    if options["off"] == (options["rules"] is not None):
        refuse("auto-mode takes --off or --rules FILE, one of them")
    if options["rules"] is not None:
        options["rules"] = read_json("--rules", options["rules"], TypeAdapter(AutoRules))


@subcommand(rules=_one_change)
@click.option("--off", is_flag=True, help="turn auto mode off for the rest of the run")
@click.option("--rules", type=FILE, help="replace the rules with this JSON file's")
async def auto_mode(run: AgentRun, following: Following, off: bool, rules: AutoRules | None) -> int:
    """For an operator: turn auto mode's judge off for the rest of the run (--off), or replace its
    rules (--rules FILE: JSON of criteria, tools and default; the judge stays). Calls the judge is
    reviewing go to a person."""
    now = await sent(f"change auto mode of {run.id}", run.set_auto_mode(off=off, rules=rules))
    following.answer({"workflow_id": run.id, "auto_mode": now}, f"{run.id}: {now}")
    return 0


async def _decide(
    run: AgentRun, following: Following, verb: str, decision: Awaitable[PlanState | ToolApproval]
) -> int:
    """0 once decided; Refused when the run refuses (it says why)."""
    decided = await sent(f"{verb} of {run.id}", decision)
    if isinstance(decided, PlanState):
        key, what = "plan", f"plan v{decided.version}"
    else:
        key, what = "call", f"{decided.call_id} ({decided.tool})"
    data = {"workflow_id": run.id, key: decided.model_dump(mode="json")}
    following.answer(data, f"{run.id}: {what} {decided.status}")
    return 0


class Refused(Exception):
    """The run refused an update, and it is said in one line: the command exits 1."""


async def sent(what: str, update: Awaitable[T]) -> T:
    """What the run answers to `update`; Refused when it refuses, once said in one line:
    `cannot WHAT: why`."""
    try:
        return await update
    except WorkflowUpdateFailedError as refused:
        say(f"cannot {what}: {refusal(refused)}")
        raise Refused from None


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
