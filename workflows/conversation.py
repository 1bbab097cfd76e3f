"""Conversations: a run that answers, then waits for the person's next message.

With `AgentInput.conversation`, the run's loop is the conversation's: each turn starts with a
person's message and ends with the agent's answer (or an interrupt, or the turn's step limit),
and the run then waits, spending nothing (no worker slot, the wall-time budget paused), for the
next message, until `end_conversation` or `idle_timeout_seconds` without one. The transcript
keeps growing across turns, so compaction and continue-as-new work as within a long run.

Messages come in by the `send_message` update (or signal). One that arrives while a turn works
is queued and appended as a user message at the next safe point: once the reply being run has
all its results, before the next model call (`deliver`), never between an assistant message
and its results. The model sees it at its very next call; a turn whose answer crossed a queued
message goes on, so the answer is to everything the person said.

What an interrupt stops is workflows/interruption.py's. When the conversation ends, the effects
of turns that answered stay; those made since the last answer (an interrupted turn's) are undone,
as a failed run's are. Cancelling the run undoes them all. Deterministic code only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Literal

from temporalio import workflow

from . import versioning
from .budget import Budget
from .context import RunContext
from .guardrails import Guardrails
from .input_limits import check_message, check_queue
from .interruption import Interruption
from .outcomes import bounded
from .reporting import Reporter
from .state import ConversationState, QueuedMessage, TurnOutcome, TurnRecord
from .status import STATUS_TURNS, ConversationStatus
from .transcript import Transcript, UserMessage
from .unknown_signals import UnknownSignals
from .usage import Usage

MAX_QUEUED = 100
"""Messages that may wait for a safe point; one more is refused until the turn takes them (their
bytes are bounded too: input_limits.MAX_QUEUED_MESSAGE_BYTES)."""
MAX_KEPT_TURNS = 500
"""Turn records kept (the newest); the older ones are counted in `earlier_turns`."""
SETTLE_PAUSE = timedelta(milliseconds=1)
"""The timer before the wait of a conversation that starts by waiting (`settle_before_waiting`)."""
MESSAGE_CHARS = 1_000
"""A message as a turn record or an event quotes it."""
ENDED_BY_THE_USER = "ended by the user"

NextTurn = Literal["turn", "ended", "continue_as_new"]


class Conversation:
    def __init__(
        self,
        ctx: RunContext,
        reporter: Reporter,
        budget: Budget,
        signals: UnknownSignals,
        guardrails: Guardrails,
    ) -> None:
        agent_input, state = ctx.input, ctx.state
        self.on = agent_input.conversation
        if self.on and state.conversation is None:
            state.conversation = ConversationState()
        self._state = state
        self._reporter = reporter
        self._budget = budget
        self._idle_timeout = agent_input.idle_timeout_seconds
        self._signals = signals
        self._guardrails = guardrails
        self._upgrade_asked = False
        """The `upgrade` signal came while the deployment's target version was another."""
        self._settles = False
        self.interruption = Interruption()

    @property
    def _talk(self) -> ConversationState:
        assert self._state.conversation is not None, "not a conversation"
        return self._state.conversation

    @property
    def turn(self) -> int:
        """The newest turn's number (0 before the first)."""
        talk = self._state.conversation
        return 0 if talk is None else talk.earlier_turns + len(talk.turns)

    @property
    def working(self) -> bool:
        talk = self._state.conversation
        return talk is not None and bool(talk.turns) and talk.turns[-1].outcome == "working"

    @property
    def waiting(self) -> bool:
        """Between turns: the run was handed on while it waited for a message."""
        return self.on and self.turn > 0 and not self.working

    @property
    def interrupted(self) -> bool:
        return self.on and self.interruption.requested

    @property
    def has_queued(self) -> bool:
        return self.on and bool(self._talk.queued)

    def status(self) -> ConversationStatus | None:
        if not self.on:
            return None
        talk = self._talk
        return ConversationStatus(
            turn=self.turn,
            working=self.working,
            queued=list(talk.queued),
            turns=talk.turns[-STATUS_TURNS:],
            ended=talk.ended,
        )

    # --- the handlers ------------------------------------------------------------------------

    def validate_message(self, text: str) -> None:
        self._must_be_on()
        if not text.strip():
            raise ValueError("the message is empty")
        talk = self._talk
        if talk.ended is not None:
            raise ValueError(f"the conversation has ended ({talk.ended})")
        if len(talk.queued) >= MAX_QUEUED:
            raise ValueError(
                f"{MAX_QUEUED} messages wait already for the turn to take them; send this "
                "one once it has"
            )
        # The bounds come last: a run recorded before them replays the checks above alone.
        check_message(text)
        turn = self.turn if self.working else self.turn + 1
        check_queue([message.text for message in talk.queued], text, turn)

    def take_message(self, text: str) -> int:
        """Queue a validated message; answers the turn it belongs to (the working one, or the
        next one)."""
        turn = self.turn if self.working else self.turn + 1
        self._talk.queued.append(QueuedMessage(text=text, turn=turn, at=workflow.now()))
        self._reporter.publish("message_queued", turn=turn, text=bounded(text, MESSAGE_CHARS))
        return turn

    def validate_interrupt(self) -> None:
        self._must_be_on()
        talk = self._talk
        if talk.ended is not None:
            raise ValueError(f"the conversation has ended ({talk.ended})")
        if not self.working:
            raise ValueError(f"no turn is working: turn {self.turn} has finished")
        if self.interruption.requested:
            raise ValueError(f"turn {self.turn} is being interrupted already")
        self._no_plan_waits("interrupt")

    def interrupt(self) -> int:
        """Stop the working turn (validated); answers its number."""
        self.interruption.request()
        self._reporter.publish("interrupt_requested", turn=self.turn)
        return self.turn

    def validate_end(self) -> None:
        self._must_be_on()
        if self._talk.ended is not None:
            raise ValueError(f"the conversation has ended already ({self._talk.ended})")
        if self.working:
            self._no_plan_waits("end the conversation")

    def end(self) -> int:
        """End the conversation (validated): a working turn is interrupted first. Answers the
        number of turns."""
        self._talk.ended = ENDED_BY_THE_USER
        if self.working and not self.interruption.requested:
            self.interrupt()
        return self.turn

    def request_upgrade(self) -> bool:
        """The `upgrade` signal: move to the deployment's current version at the next wait
        between turns, if this run's version is no longer the target. Answers whether it will."""
        moves = self.on and workflow.info().is_target_worker_deployment_version_changed()
        self._upgrade_asked = self._upgrade_asked or moves
        return moves

    def _must_be_on(self) -> None:
        if not self.on:
            raise ValueError("this run is not a conversation (start it with conversation=True)")

    def _no_plan_waits(self, what: str) -> None:
        plan = self._state.plan
        if plan is not None and plan.status == "awaiting_approval":
            raise ValueError(
                f"plan v{plan.version} waits for a decision: approve or reject it, then {what}"
            )

    # --- the loop's hooks --------------------------------------------------------------------

    def first_turn(self, prompt: str) -> None:
        """The run's prompt is the first turn's message (appended by the loop)."""
        if self.on:
            self._start_turn(prompt)

    def deliver(self, transcript: Transcript) -> None:
        """At a safe point of the working turn (every call of the last reply has its result,
        the next model call is not made yet): append the queued messages, oldest first."""
        if not self.on or not self.working:
            return
        talk = self._talk
        messages, talk.queued = talk.queued, []
        for message in messages:
            transcript.append(UserMessage(content=message.text))
            self._guardrails.take_input(message.text)
            self._reporter.publish(
                "message_delivered", turn=self.turn, text=bounded(message.text, MESSAGE_CHARS)
            )
        talk.turns[-1].steering += len(messages)

    def out_of_steps(self) -> bool:
        """The working turn has made its max_steps model calls (a conversation's step limit is
        per turn: the turn ends, the conversation goes on)."""
        return self.on and self._budget.steps_this_turn >= self._budget.limits.max_steps

    def finish_turn(self, outcome: TurnOutcome, answer: str | None = None) -> None:
        talk, state = self._talk, self._state
        record = talk.turns[-1]
        record.outcome = outcome
        record.answer = answer
        record.steps = state.steps - record.steps_before
        record.usage = _spent_since(state.usage, record.usage_before)
        record.ended_at = talk.idle_since = workflow.now()
        if outcome == "answered":
            talk.kept_effects = len(state.effects)
        self.interruption.reset()
        self._reporter.publish(
            "turn_finished",
            turn=record.turn,
            usage=record.usage,
            outcome=outcome,
            text=answer,
        )
        extra = len(talk.turns) - MAX_KEPT_TURNS
        if extra > 0:
            del talk.turns[:extra]
            talk.earlier_turns += extra
        done = {"answered": "answered", "interrupted": "was interrupted"}.get(
            outcome, f"stopped ({outcome})" if outcome != "refused" else "refused its message"
        )
        self._reporter.set_status(
            "running",
            f"turn {record.turn} {done}; waiting for the next message (update or signal "
            "send_message; end_conversation ends it)",
        )

    def settle_before_waiting(self) -> None:
        """Before the tools' local activity: whether a run that starts by waiting between turns
        begins its wait after a timer (versioning.CONTINUED_WAIT_SETTLES says why)."""
        self._settles = self.waiting and versioning.waits_after_a_timer()

    async def next_turn(self, hand_on_due: Callable[[], bool], transcript: Transcript) -> NextTurn:
        """Wait, spending nothing, for the next message ("turn": its turn has started, its
        messages appended), the end ("ended"), or a reason to continue as new: Temporal's
        suggestion, or a worker deployment version that is no longer the target
        (docs/deployment.md), woken by the next message or the `upgrade` signal."""
        talk = self._talk
        if self._settles:  # in a workflow task of its own (versioning.CONTINUED_WAIT_SETTLES)
            self._settles = False
            await workflow.sleep(SETTLE_PAUSE)
        self._signals.drop_while_waiting()
        if talk.ended is None and not talk.queued:
            idle_since = talk.idle_since or workflow.now()
            waited = (workflow.now() - idle_since).total_seconds()
            self._budget.pause(workflow.now())
            try:
                await workflow.wait_condition(
                    lambda: (
                        bool(talk.queued)
                        or talk.ended is not None
                        or hand_on_due()
                        or self._upgrade_asked
                    ),
                    timeout=timedelta(seconds=max(self._idle_timeout - waited, 0.001)),
                    timeout_summary=f"the message of turn {self.turn + 1}",
                )
            except TimeoutError:
                talk.ended = f"idle for {self._idle_timeout:g} s (idle_timeout_seconds)"
            finally:
                if workflow.in_workflow():  # not when the worker drops the run from its cache
                    self._budget.resume(workflow.now())
        if talk.ended is not None:
            return "ended"
        if (
            workflow.info().is_target_worker_deployment_version_changed()
            and versioning.moves_between_turns()
        ):
            # The queued messages go along: the next run, on the current version, starts
            # their turn.
            return "continue_as_new"
        if not talk.queued:
            return "continue_as_new"
        messages, talk.queued = talk.queued, []
        self._start_turn(messages[0].text)
        for message in messages:
            transcript.append(UserMessage(content=message.text))
            self._guardrails.take_input(message.text)
        talk.turns[-1].steering = len(messages) - 1
        return "turn"

    def unanswered_effects(self) -> int:
        """Where the effects made since the last answer start in `RunState.effects`."""
        return self._talk.kept_effects

    def last_answer(self) -> str:
        answers = [t.answer for t in self._talk.turns if t.answer is not None]
        return answers[-1] if answers else ""

    def turns(self) -> list[TurnRecord]:
        return list(self._talk.turns)

    def ended(self) -> str | None:
        return self._talk.ended

    def _start_turn(self, message: str) -> None:
        state = self._state
        turn = self.turn + 1
        self._talk.turns.append(
            TurnRecord(
                turn=turn,
                message=bounded(message, MESSAGE_CHARS),
                started_at=workflow.now(),
                steps_before=state.steps,
                usage_before=state.usage,
            )
        )
        self.interruption.reset()
        self._reporter.publish("turn_started", turn=turn, text=bounded(message, MESSAGE_CHARS))
        if turn > 1:
            self._reporter.set_status("running", f"turn {turn}: working")


def _spent_since(now: Usage, before: Usage) -> Usage:
    cost = (
        None
        if now.cost_usd is None or before.cost_usd is None
        else round(now.cost_usd - before.cost_usd, 10)
    )
    return Usage(
        input_tokens=now.input_tokens - before.input_tokens,
        output_tokens=now.output_tokens - before.output_tokens,
        cached_input_tokens=now.cached_input_tokens - before.cached_input_tokens,
        cache_write_tokens=now.cache_write_tokens - before.cache_write_tokens,
        cost_usd=cost,
    )
