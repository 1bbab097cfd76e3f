"""A conversation at this terminal (`chat`, and a self-contained `"PROMPT" --conversation`): each
line typed is a turn; a line typed while a turn works steers it, or, when a plan or a tool call
waits, is the decision (answers.py); Ctrl-C interrupts the working turn, and a second Ctrl-C,
/end or the end of stdin ends the conversation, whose turns are then printed. A turn is followed
and printed as `send --wait` prints one (conversation.py)."""

from __future__ import annotations

import asyncio
import contextlib

from temporalio.client import WorkflowUpdateFailedError

from ...client.agent_client import AgentRun, AgentUpdateNotDelivered
from ...serving.command_line import say
from ..args import Following
from ..conversation import end_conversation, follow_turn
from ..decide import Question, refusal, too_large
from .answers import ask
from .keyboard import CtrlC, Lines, stdin

ENDS = ("/end", "/quit", "/exit")
PROMPT = "> "


async def first_message() -> str | None:
    """The conversation's first message, asked for when the command line gave none."""
    say("a conversation: type a message, Enter sends it (/end or Ctrl-D ends it)")
    first = await stdin().next()
    return first.strip() if first is not None and first.strip() else None


async def chat(agent_run: AgentRun, following: Following) -> int:
    """Hold the conversation that has started, from its first turn to its end."""
    lines, ctrl_c = stdin(), CtrlC()
    try:
        number = 1
        while True:
            going_on, started = await _turn(agent_run, number, following, lines, ctrl_c)
            if not going_on:
                break
            if started is not None:
                # A line typed as the turn ended started the next one: follow it.
                number = started
                continue
            posted = await _next_message(agent_run, lines, ctrl_c)
            if posted is None:
                break
            number = posted
    finally:
        ctrl_c.close()
    return await end_conversation(agent_run, following)


async def _next_message(agent_run: AgentRun, lines: Lines, ctrl_c: CtrlC) -> int | None:
    """The next line typed, sent: the number of the turn it went to. None ends the chat: the
    end of input, an end word, Ctrl-C, or a refusal. A line over its bound is refused and the
    chat goes on, so that the person can type a shorter one."""
    while True:
        say(PROMPT.strip())
        line = await _line_or_ctrl_c(lines, ctrl_c)
        if line is None or line.strip() in ENDS:
            return None
        if not line.strip():
            continue
        try:
            return await agent_run.post(line.strip())
        except (WorkflowUpdateFailedError, AgentUpdateNotDelivered) as refused:
            say(f"not sent: {refusal(refused)}")
            # Nothing reached the run, or it was too long: it may be typed again.
            if isinstance(refused, WorkflowUpdateFailedError) and not too_large(refused):
                return None


async def _turn(
    agent_run: AgentRun, number: int, following: Following, lines: Lines, ctrl_c: CtrlC
) -> tuple[bool, int | None]:
    """One turn at the terminal: False once the conversation is to end (a second Ctrl-C), and
    the number of the next turn when a line typed as this one ended started it (the line went
    to the workflow after its turn had answered; a CI run lost that turn's answer so)."""
    answers: asyncio.Queue[str | None] = asyncio.Queue()

    async def asking(question: Question) -> None:
        await ask(agent_run, question, answers.get())

    following_it = asyncio.ensure_future(follow_turn(agent_run, number, following, asking))
    pressed = 0
    try:
        while not following_it.done():
            line = asyncio.ensure_future(lines.next())
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
                posted = await _steer_or_answer(
                    agent_run, number, text, answers if following.ask else None
                )
                if posted is not None and posted != number:
                    # This turn had ended: its answer is printed before the next is followed.
                    return (await following_it) is not None, posted
        return following_it.result() is not None, None
    finally:
        following_it.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await following_it


async def _steer_or_answer(
    agent_run: AgentRun, number: int, text: str, answers: asyncio.Queue[str | None] | None
) -> int | None:
    """A line typed while turn `number` works: the answer to what waits for a person (`answers`:
    where this terminal asks), else a message for the conversation. The number of the turn the
    message went to: `number` when it steers this one, the next when this one had ended; None
    when nothing was sent."""
    status = await agent_run.status()
    plan_waits = status.plan is not None and status.plan.status == "awaiting_approval"
    if plan_waits or status.approvals:
        if answers is None:
            # With --address the decision is taken where the hint above says, not here: a line
            # queued for a question this terminal never asks would be lost without a word.
            say("not sent: the turn waits for a decision; decide it as shown above, then type")
            return None
        answers.put_nowait(text)
        return None
    if not text.strip():
        return None
    try:
        turn = await agent_run.post(text.strip())
    except (WorkflowUpdateFailedError, AgentUpdateNotDelivered) as refused:
        say(f"not sent: {refusal(refused)}")
        return None
    if turn == number:
        say(f"(sent to turn {turn}; the model reads it at its next call)")
    return turn


async def _interrupt(agent_run: AgentRun) -> None:
    try:
        turn = await agent_run.interrupt()
        say(f"interrupting turn {turn} (Ctrl-C again ends the conversation)")
    except (WorkflowUpdateFailedError, AgentUpdateNotDelivered) as refused:
        say(f"not interrupted: {refusal(refused)}")


async def _line_or_ctrl_c(lines: Lines, ctrl_c: CtrlC) -> str | None:
    line = asyncio.ensure_future(lines.next())
    press = asyncio.ensure_future(ctrl_c.presses.get())
    await asyncio.wait({line, press}, return_when=asyncio.FIRST_COMPLETED)
    press.cancel()
    if line.done():
        return line.result()
    line.cancel()
    return None
