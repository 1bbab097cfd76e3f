"""Conversations from the command line (docs/conversations.md): with --address, `"PROMPT"
--conversation` follows the first turn and returns, and `send`, `interrupt` and `end` carry on
from anywhere. A turn's steps go to stderr as a run's do; its answer goes to stdout. A
conversation held at this terminal (`chat`) is terminal/chat.py's, which follows each turn here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import click
from temporalio.client import WorkflowUpdateFailedError

from ..client.agent_client import AgentRun, AgentRunFailed, AgentUpdateNotDelivered
from ..serving.command_line import for_stdout, say
from ..workflows.input_limits import check_message
from ..workflows.inputs import AgentResult
from ..workflows.state import TurnRecord
from . import decide
from .args import Following, Text, argument, program, subcommand
from .decide import Question
from .tables import StepLines, usage_text


async def converse(agent_run: AgentRun, following: Following) -> int:
    """A conversation that has started elsewhere: its first turn followed, and the commands
    that carry it on shown."""
    record = await follow_turn(agent_run, 1, following)
    where = following.flags
    say(
        f"conversation {agent_run.id} waits for the next message: {program()} send "
        f"{agent_run.id} TEXT{where} [--wait]; {program()} end {agent_run.id}{where}"
    )
    return 0 if record is not None and record.outcome == "answered" else 1


async def follow_turn(
    agent_run: AgentRun,
    number: int,
    following: Following,
    ask: Callable[[Question], Awaitable[None]] | None = None,
) -> TurnRecord | None:
    """Print turn `number`'s steps as they finish (stderr) and its answer (stdout); show what
    waits for a person, and have `ask` decide it when given (at this terminal). None when the
    conversation ended or failed before the turn finished."""
    lines = StepLines()
    async for event in agent_run.turn_events(number):
        lines.add(event)
        if event.kind == "turn_started" and ask is not None:
            say(f"turn {event.turn}: working (a line typed steers it; Ctrl-C interrupts it)")
        if event.kind == "message_delivered":
            say(f"(the turn now has your message: {event.text})")
        if event.kind == "turn_finished":
            lines.show(lines.records)
            break
        asking = ask if following.ask else None
        question = await decide.shown(agent_run, event, following, ask=asking is not None)
        if question is not None and asking is not None:
            await asking(question)
    try:
        record = await agent_run.turn(number)
    except (LookupError, AgentRunFailed) as gone:
        say(str(gone))
        return None
    _print_turn(record, following)
    return record


def _print_turn(record: TurnRecord, following: Following) -> None:
    if following.json:
        print(json.dumps(record.model_dump(mode="json")))
    elif record.answer is not None:
        print(for_stdout(record.answer), flush=True)
    summary = f"turn {record.turn} {record.outcome}: {record.steps} steps, "
    say(summary + usage_text(record.usage))


async def end_conversation(agent_run: AgentRun, following: Following, *, chat: bool = True) -> int:
    """End the conversation and print its turns. A conversation that had ended already when a
    chat ends is reported by its result; the `end` subcommand says that the run refused."""
    try:
        try:
            result = await agent_run.end()
        except WorkflowUpdateFailedError as refused:
            if not chat:
                say(f"cannot end {agent_run.id}: {decide.refusal(refused)}")
                return 1
            result = await agent_run.result()
    except AgentRunFailed as failure:
        say(str(failure))
        return 1
    except AgentUpdateNotDelivered as busy:
        if not chat:
            raise  # reported by the subcommands' dispatch, as every server's refusal is
        say(f"not ended: {decide.refusal(busy)}")
        return 1
    _print_end(agent_run.id, result, following)
    return 0


def _print_end(workflow_id: str, result: AgentResult, following: Following) -> None:
    if following.json:
        turns = [t.model_dump(mode="json") for t in result.turns]
        ended = {"workflow_id": workflow_id, "status": "completed", "ended": result.ended}
        spent = {"steps": result.steps, "usage": result.usage.model_dump()}
        print(json.dumps({**ended, "turns": turns, **spent}))
        return
    say(
        f"conversation {workflow_id} {result.ended or 'ended'}: {len(result.turns)} turns, "
        f"{result.steps} steps, {usage_text(result.usage)}"
    )
    for record in result.turns:
        say(f"  turn {record.turn} {record.outcome}: {record.steps} steps: {record.message}")


# --- the subcommands: send, interrupt, end -------------------------------------------------


@subcommand()
@argument("text", "the message", type=Text("", check_message))
@click.option("--wait", is_flag=True, help="then follow the turn and print its answer")
async def send(agent_run: AgentRun, following: Following, text: str, wait: bool) -> int:
    """Send a message to a conversation: it starts the next turn, or steers the working one; prints
    the turn's number."""
    turn = await decide.sent(f"send to {agent_run.id}", agent_run.post(text.strip()))
    if not wait:
        following.answer(
            {"workflow_id": agent_run.id, "turn": turn}, f"{agent_run.id}: turn {turn}"
        )
        return 0
    record = await follow_turn(agent_run, turn, following)
    return 0 if record is not None and record.outcome == "answered" else 1


@subcommand()
async def interrupt(agent_run: AgentRun, following: Following) -> int:
    """Stop a conversation's working turn; it then waits for a message."""
    turn = await decide.sent(f"interrupt {agent_run.id}", agent_run.interrupt())
    stopped = {"workflow_id": agent_run.id, "turn": turn}
    following.answer(stopped, f"{agent_run.id}: turn {turn} interrupted")
    return 0


@subcommand()
async def end(agent_run: AgentRun, following: Following) -> int:
    """End a conversation; prints its turns."""
    return await end_conversation(agent_run, following, chat=False)
