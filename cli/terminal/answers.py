"""A line typed at the terminal, as the decision on what waits for a person: for a plan, Enter (or
y) approves and anything else is the feedback; for a tool call, Enter (or y) approves, 'always'
approves it and the tool's later calls, and anything else denies it with that as the reason.
Sent through the run's update: a decision that did not go through is said in one line and the
run goes on."""

from __future__ import annotations

from collections.abc import Awaitable

from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from ...client.agent_client import AgentRun, AgentUpdateNotDelivered
from ...serving.command_line import say
from ..decide import CallQuestion, PlanQuestion, Question, refusal

APPROVALS = ("", "y", "yes")


async def ask(
    agent_run: AgentRun, question: Question, reading: Awaitable[str | None]
) -> str | None:
    """Ask `question` here, once it is shown (decide.show), and send the decision the line from
    `reading` says: the line, or None when there was none (stdin ended)."""
    match question:
        case PlanQuestion():
            say("Approve it? Enter (or y) approves; anything else is your feedback, to plan again:")
        case CallQuestion(event):
            say(
                f"Run it? Enter (or y) approves; 'always' approves it and the run's later "
                f"{event.tool} calls; anything else denies it, with that as the reason:"
            )
    line = await reading
    if line is not None:
        await answer(agent_run, question, line)
    return line


async def answer(agent_run: AgentRun, question: Question, line: str) -> None:
    """Send the decision `line` says on `question`."""
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
