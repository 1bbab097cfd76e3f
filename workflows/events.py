"""The progress stream: the events a run publishes as it goes (workflows/reporting.py), which
subscribers follow by `AgentRun.events()` without adding to its history."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from .usage import Usage

EVENTS_TOPIC = "events"
"""The progress stream's topic: every `AgentEvent` of a run, in order."""


AgentEventKind = Literal[
    "step_started",
    "step_finished",
    "tool_call_started",
    "tool_call_finished",
    "retry",
    "approval_requested",
    "approval_decided",
    "judge_verdict",
    "guardrail",
    "callback_requested",
    "callback_answered",
    "plan_submitted",
    "plan_decided",
    "compaction",
    "compensation",
    "continued_as_new",
    "tools_unavailable",
    "turn_started",
    "turn_finished",
    "message_queued",
    "message_delivered",
    "interrupt_requested",
    "completed",
    "failed",
]
FirstDecider = Literal["judge", "remembered"]
"""Who decides a call that asks before a person could (an approval_requested event's outcome)."""


SHOWN_RESULT_CHARS = 1_000
"""What a tool_call_finished event shows of a result: the transcript has it whole."""


class AgentEvent(BaseModel):
    """One entry of a run's progress stream, published as it happens (see agent_client.py
    `AgentRun.events`). Fields that do not apply to an event's kind are None."""

    kind: AgentEventKind
    step: int
    """The model call the event belongs to (0 before the first)."""
    at: datetime
    model: str | None = None
    usage: Usage | None = None
    """step_finished: that model call's tokens and cost; completed and failed: the run's;
    judge_verdict: the judge's call's."""
    call_id: str | None = None
    tool: str | None = None
    arguments: str | None = None
    """As the model wrote them, cut at 1,000 characters."""
    outcome: str | None = None
    """tool_call_finished: the ToolOutcome; approval_requested: who decides the call first, when
    not a person (`judge`: auto mode's judge reviews it, a judge_verdict follows; `remembered`:
    a remembered denial decides it at once, an approval_decided follows); approval_decided: the
    approval status;
    judge_verdict: what came of it (approved, denied, escalated, late); guardrail: passed or
    tripped (`text` names it, and says why it tripped; `tool` and `call_id` for a tool
    result's, published once all the result's guardrails answered, in the policy's order);
    plan_decided: approved or rejected; compensation: the CompensationStatus."""
    latency_ms: int | None = None
    attempts: int | None = None
    text: str | None = None
    """A line for people: the answer (completed), the error (failed), a retry's reason, a
    person's reason, the judge's reason, the plan's steps; a conversation's message (turn_started,
    message_queued, message_delivered) or a turn's answer (turn_finished)."""
    turn: int | None = None
    """A conversation's events of turns and messages: the turn they belong to."""
    confidence: float | None = Field(default=None, exclude_if=lambda value: value is None)
    """judge_verdict: how sure auto mode's judge said it was (None: no valid verdict)."""
    result: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """tool_call_finished of a call that ran ("ok"): its result as the model reads it, cut at
    SHOWN_RESULT_CHARS. None for any other outcome (`text` says why), and in a run with
    tool-result guardrails, whose check comes after this event (docs/guardrails.md).
    guardrail of a tool result: what the model reads, cut alike, on one of the call's verdicts
    (`checks`): the last, once all passed, the result (an error's too); else the first that
    tripped, the refusal in the result's place."""
    checks: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """tool_call_finished of a call whose result the run's tool-result guardrails check after
    this event: how many there are. A guardrail event with this call's `call_id` follows for
    each, and one of them carries what the model reads (`result`). None: no check follows."""
    script: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """An event of a call a code-mode script made: the id of the run_code call whose script
    made it (docs/code-mode.md)."""
