"""Conversations at the command line (docs/conversations.md).

`starter.py chat` (and a self-contained `"PROMPT" --conversation`): each line typed is a turn;
a line typed while a turn works is sent as a steering message (or, when a plan or a tool call
waits, is the decision, as in a run); Ctrl-C interrupts the working turn, a second Ctrl-C, /end
or the end of stdin ends the conversation. With --address, `"PROMPT" --conversation` follows
the first turn and returns, and `send`, `interrupt` and `end` carry on from anywhere. A turn's
steps go to stderr as a run's do; its answer goes to stdout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from dataclasses import dataclass, field

import click
from temporalio.client import WorkflowUpdateFailedError

from ..client.agent_client import AgentRun, AgentRunFailed, AgentUpdateNotDelivered
from ..serving.command_line import say
from ..workflows.input_limits import check_message
from ..workflows.inputs import AgentResult
from ..workflows.state import TurnRecord
from . import decide
from .args import Following, Text, argument, program, subcommand
from .tables import StepLines, usage_text

ENDS = ("/end", "/quit", "/exit")
PROMPT = "> "


@dataclass
class CtrlC:
    """Ctrl-C presses, counted; the default handler comes back on `close`."""

    presses: asyncio.Queue[None] = field(default_factory=asyncio.Queue)

    def __post_init__(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().add_signal_handler(
                signal.SIGINT, self.presses.put_nowait, None
            )

    def close(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)


async def converse(agent_run: AgentRun, following: Following, *, chat: bool) -> int:
    """A conversation that has started: at this terminal (`chat`), or its first turn followed
    and the commands that carry on shown."""
    if chat:
        return await _chat(agent_run, following)
    record = await follow_turn(agent_run, 1, following)
    where = f" --address {following.address}" if following.address else ""
    say(
        f"conversation {agent_run.id} waits for the next message: {program()} send "
        f"{agent_run.id} TEXT{where} [--wait]; {program()} end {agent_run.id}{where}"
    )
    return 0 if record is not None and record.outcome == "answered" else 1


async def follow_turn(
    agent_run: AgentRun,
    number: int,
    following: Following,
    answers: asyncio.Queue[str | None] | None = None,
) -> TurnRecord | None:
    """Print turn `number`'s steps as they finish (stderr) and its answer (stdout); show what
    waits for a person, and decide it with the next line from `answers` when given. None when
    the conversation ended or failed before the turn finished."""
    lines = StepLines()
    async for event in agent_run.turn_events(number):
        lines.add(event)
        if event.kind == "turn_started" and answers is not None:
            say(f"turn {event.turn}: working (a line typed steers it; Ctrl-C interrupts it)")
        if event.kind == "message_delivered":
            say(f"(the turn now has your message: {event.text})")
        if event.kind == "turn_finished":
            lines.show(lines.records)
            break
        question = await decide.question_in(agent_run, event)
        if question is None:
            continue
        ask = following.ask and answers is not None
        decide.show(agent_run.id, question, following, ask=ask)
        if ask and answers is not None:
            line = await answers.get()
            if line is not None:
                await decide.answer(agent_run, question, line)
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
        print(record.answer, flush=True)
    summary = f"turn {record.turn} {record.outcome}: {record.steps} steps, "
    say(summary + usage_text(record.usage))


async def _chat(agent_run: AgentRun, following: Following) -> int:
    stdin, ctrl_c = decide.stdin(), CtrlC()
    try:
        number = 1
        while True:
            going_on, started = await _turn(agent_run, number, following, stdin, ctrl_c)
            if not going_on:
                break
            if started is not None:
                # A line typed as the turn ended started the next one: follow it.
                number = started
                continue
            posted = await _next_message(agent_run, stdin, ctrl_c)
            if posted is None:
                break
            number = posted
    finally:
        ctrl_c.close()
    return await _end(agent_run, following)


async def _next_message(agent_run: AgentRun, stdin: decide.Lines, ctrl_c: CtrlC) -> int | None:
    """The next line typed, sent: the number of the turn it went to. None ends the chat: the
    end of input, an end word, Ctrl-C, or a refusal. A line over its bound is refused and the
    chat goes on, so that the person can type a shorter one."""
    while True:
        say(PROMPT.strip())
        line = await _line_or_ctrl_c(stdin, ctrl_c)
        if line is None or line.strip() in ENDS:
            return None
        if not line.strip():
            continue
        try:
            return await agent_run.post(line.strip())
        except (WorkflowUpdateFailedError, AgentUpdateNotDelivered) as refused:
            say(f"not sent: {decide.refusal(refused)}")
            # Nothing reached the run, or it was too long: it may be typed again.
            if isinstance(refused, WorkflowUpdateFailedError) and not decide.too_large(refused):
                return None


async def _turn(
    agent_run: AgentRun, number: int, following: Following, stdin: decide.Lines, ctrl_c: CtrlC
) -> tuple[bool, int | None]:
    """One turn at the terminal: False once the conversation is to end (a second Ctrl-C), and
    the number of the next turn when a line typed as this one ended started it (the line went
    to the workflow after its turn had answered; a CI run lost that turn's answer so)."""
    answers: asyncio.Queue[str | None] = asyncio.Queue()
    following_it = asyncio.ensure_future(follow_turn(agent_run, number, following, answers))
    pressed = 0
    try:
        while not following_it.done():
            line = asyncio.ensure_future(stdin.next())
            press = asyncio.ensure_future(ctrl_c.presses.get())
            await asyncio.wait({following_it, line, press}, return_when=asyncio.FIRST_COMPLETED)
            for waiting in (line, press):
                waiting.cancel()
            if press.done() and not press.cancelled():
                pressed += 1
                if pressed > 1:
                    return False, None
                await _interrupt(agent_run)
            if line.done() and not line.cancelled():
                text = line.result()
                if text is None or text.strip() in ENDS:
                    return False, None
                posted = await _steer_or_answer(agent_run, number, text, answers)
                if posted is not None and posted != number:
                    # This turn had ended: its answer is printed before the next is followed.
                    return (await following_it) is not None, posted
        return following_it.result() is not None, None
    finally:
        following_it.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await following_it


async def _steer_or_answer(
    agent_run: AgentRun, number: int, text: str, answers: asyncio.Queue[str | None]
) -> int | None:
    """A line typed while turn `number` works: the answer to what waits for a person, else a
    message for the conversation. The number of the turn the message went to: `number` when it
    steers this one, the next when this one had ended; None when nothing was sent."""
    status = await agent_run.status()
    plan_waits = status.plan is not None and status.plan.status == "awaiting_approval"
    if plan_waits or status.approvals:
        answers.put_nowait(text)
        return None
    if not text.strip():
        return None
    try:
        turn = await agent_run.post(text.strip())
    except (WorkflowUpdateFailedError, AgentUpdateNotDelivered) as refused:
        say(f"not sent: {decide.refusal(refused)}")
        return None
    if turn == number:
        say(f"(sent to turn {turn}; the model reads it at its next call)")
    return turn


async def _interrupt(agent_run: AgentRun) -> None:
    try:
        turn = await agent_run.interrupt()
        say(f"interrupting turn {turn} (Ctrl-C again ends the conversation)")
    except (WorkflowUpdateFailedError, AgentUpdateNotDelivered) as refused:
        say(f"not interrupted: {decide.refusal(refused)}")


async def _line_or_ctrl_c(stdin: decide.Lines, ctrl_c: CtrlC) -> str | None:
    line = asyncio.ensure_future(stdin.next())
    press = asyncio.ensure_future(ctrl_c.presses.get())
    await asyncio.wait({line, press}, return_when=asyncio.FIRST_COMPLETED)
    press.cancel()
    if line.done():
        return line.result()
    line.cancel()
    return None


async def _end(agent_run: AgentRun, following: Following, *, chat: bool = True) -> int:
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
    _print_end(agent_run.id, result, json_out=following.json)
    return 0


def _print_end(workflow_id: str, result: AgentResult, *, json_out: bool) -> None:
    if json_out:
        turns = [t.model_dump(mode="json") for t in result.turns]
        ended = {"workflow_id": workflow_id, "status": "completed", "ended": result.ended}
        print(
            json.dumps(
                {**ended, "turns": turns, "steps": result.steps, "usage": result.usage.model_dump()}
            )
        )
        return
    say(
        f"conversation {workflow_id} {result.ended or 'ended'}: {len(result.turns)} turns, "
        f"{result.steps} steps, {usage_text(result.usage)}"
    )
    for record in result.turns:
        say(f"  turn {record.turn} {record.outcome}: {record.steps} steps: {record.message}")


# --- the subcommands: send, interrupt, end -------------------------------------------------


@subcommand(
    "Send a message to a conversation: it starts the next turn, or steers the working one; "
    "prints the turn's number."
)
@argument("text", "the message", type=Text("", check_message))
@click.option("--wait", is_flag=True, help="then follow the turn and print its answer")
async def send(agent_run: AgentRun, following: Following, text: str, wait: bool) -> int:
    try:
        turn = await agent_run.post(text.strip())
    except WorkflowUpdateFailedError as refused:
        say(f"cannot send to {agent_run.id}: {decide.refusal(refused)}")
        return 1
    if not wait:
        sent = {"workflow_id": agent_run.id, "turn": turn}
        print(json.dumps(sent) if following.json else f"{agent_run.id}: turn {turn}")
        return 0
    record = await follow_turn(agent_run, turn, following)
    return 0 if record is not None and record.outcome == "answered" else 1


@subcommand("Stop a conversation's working turn; it then waits for a message.")
async def interrupt(agent_run: AgentRun, following: Following) -> int:
    try:
        turn = await agent_run.interrupt()
    except WorkflowUpdateFailedError as refused:
        say(f"cannot interrupt {agent_run.id}: {decide.refusal(refused)}")
        return 1
    stopped = {"workflow_id": agent_run.id, "turn": turn}
    print(json.dumps(stopped) if following.json else f"{agent_run.id}: turn {turn} interrupted")
    return 0


@subcommand("End a conversation; prints its turns.")
async def end(agent_run: AgentRun, following: Following) -> int:
    return await _end(agent_run, following, chat=False)
