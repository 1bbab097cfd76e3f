"""The run's hard stops: steps, context, total tokens and wall time. Pure and deterministic."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from .errors import (
    AgentBudgetExceeded,
    AgentConfigurationError,
    AgentStepLimitExceeded,
)
from .inputs import Limits
from .specs import ToolSpec
from .state import FailureDetails, RunState
from .transcript import Message
from .usage import Usage


def estimate_tokens(text: str) -> int:
    """About four characters a token, for what no provider has counted yet."""
    return (len(text) + 3) // 4


def estimate_message_tokens(messages: list[Message]) -> int:
    return estimate_tokens(json.dumps([m.model_dump(mode="json") for m in messages]))


class Budget:
    """What the run has spent, checked against its limits at every step boundary.

    Its counts live in the run's state (steps, usage, paused time, the last call's context);
    only a pause in progress is its own."""

    def __init__(self, limits: Limits, state: RunState, inherited_steps: int = 0) -> None:
        self.limits = limits
        self._state = state
        self._paused_at: datetime | None = None
        self._inherited_steps = inherited_steps
        """A fork's steps 1..K, made by the run it was forked from: max_steps counts after."""

    @property
    def steps(self) -> int:
        """The model calls this run made (a fork's inherited steps not counted)."""
        return self._state.steps - self._inherited_steps

    @property
    def steps_left(self) -> int:
        """What max_steps leaves: of the turn in a conversation, of the run (from its fork
        point) otherwise."""
        return self.limits.max_steps - self.steps_this_turn

    @property
    def usage(self) -> Usage:
        return self._state.usage

    def pause(self, now: datetime) -> None:
        """Stop the wall clock: time spent waiting for a person is not the agent's."""
        self._paused_at = now

    def resume(self, now: datetime) -> None:
        if self._paused_at is not None:
            self._state.paused_seconds += (now - self._paused_at).total_seconds()
            self._paused_at = None

    def elapsed_seconds(self, now: datetime) -> float:
        state = self._state
        return (now - state.started_at).total_seconds() - state.paused_seconds

    def remaining_seconds(self, now: datetime) -> float | None:
        if self.limits.max_wall_seconds is None:
            return None
        return self.limits.max_wall_seconds - self.elapsed_seconds(now)

    def deadline(self, now: datetime) -> timedelta | None:
        """What is left of max_wall_seconds, as an activity's schedule-to-close timeout."""
        remaining = self.remaining_seconds(now)
        return None if remaining is None else timedelta(seconds=max(remaining, 0.001))

    def context_estimate(
        self,
        system: str | None,
        tools: list[ToolSpec],
        messages: list[Message],
        appended_since_last_call: list[Message],
    ) -> int:
        last = self._state.last_context_tokens
        if last is None:
            prefix = (system or "") + json.dumps([t.model_dump(mode="json") for t in tools])
            return estimate_tokens(prefix) + estimate_message_tokens(messages)
        return last + estimate_message_tokens(appended_since_last_call)

    @property
    def steps_this_turn(self) -> int:
        """Model calls that count against max_steps: a conversation's turn's own, else all."""
        conversation = self._state.conversation
        if conversation is None or not conversation.turns:
            return self.steps
        return self.steps - conversation.turns[-1].steps_before

    def check_before_model_call(self, now: datetime, context_tokens: int) -> None:
        limits = self.limits
        if self.steps_this_turn >= limits.max_steps:
            what = "the turn" if self._state.conversation is not None else "the run"
            raise AgentStepLimitExceeded(
                f"max_steps={limits.max_steps} reached: {what} made {self.steps_this_turn} "
                "model calls without a final answer",
                self.details(),
            )
        self.check_spend(now)
        if limits.max_context_tokens is not None and context_tokens > limits.max_context_tokens:
            raise AgentBudgetExceeded(
                f"max_context_tokens={limits.max_context_tokens} exceeded: the next model call "
                f"would send about {context_tokens} input tokens",
                self.details(),
            )

    def check_spend(self, now: datetime) -> None:
        """The budgets that can run out in the middle of a step: tokens, cost and wall time."""
        limits = self.limits
        total = self.usage.total_tokens
        if limits.max_total_tokens is not None and total > limits.max_total_tokens:
            raise AgentBudgetExceeded(
                f"max_total_tokens={limits.max_total_tokens} exceeded: the run has used {total} "
                f"tokens ({self.usage.input_tokens} input, {self.usage.output_tokens} output)",
                self.details(),
            )
        if limits.max_cost_usd is not None:
            if self.usage.cost_usd is None:
                raise AgentConfigurationError(
                    f"max_cost_usd={limits.max_cost_usd:g} cannot be enforced: a model call of "
                    "this run has no price (set ModelSettings.price, or add the model to the file "
                    "named by $AGENT_PRICES)",
                    self.details(),
                )
            if self.usage.cost_usd > limits.max_cost_usd:
                raise AgentBudgetExceeded(
                    f"max_cost_usd={limits.max_cost_usd:g} exceeded: the run has cost "
                    f"${self.usage.cost_usd:.6f}",
                    self.details(),
                )
        elapsed = self.elapsed_seconds(now)
        if limits.max_wall_seconds is not None and elapsed >= limits.max_wall_seconds:
            raise AgentBudgetExceeded(
                f"max_wall_seconds={limits.max_wall_seconds:g} exceeded: the run has been going "
                f"for {elapsed:.1f} s",
                self.details(),
            )

    def record_model_call(self, usage: Usage) -> None:
        state = self._state
        state.steps += 1
        state.usage = state.usage + usage
        state.last_context_tokens = usage.input_tokens + usage.output_tokens

    def record_side_call(self, usage: Usage) -> None:
        """A model call that is not a step (a compaction's summary): it costs, it counts."""
        self._state.usage = self._state.usage + usage

    def forget_reported_context(self) -> None:
        """After a compaction the last reported input no longer describes what will be sent."""
        self._state.last_context_tokens = None

    def details(self) -> FailureDetails:
        return self._state.failure_details()
