"""Reporting: what a run tells the world while it goes, without touching its transcript.

Three channels: the progress stream (`AgentEvent`s, workflow state only, no history event), the
search attributes AgentStatus and AgentStep (each upsert is a history event and a visibility
write, so they move only with the status and every AGENT_STEP_EVERY steps), and the current
details that the Web UI shows on a run's page. No transcript content goes into the last two.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStream

import workflows.versioning as versioning
from workflows.models import (
    AGENT_STATUS,
    AGENT_STEP,
    EVENTS_TOPIC,
    AgentEvent,
    AgentEventKind,
    AgentStatus,
)
from workflows.outcomes import Outcome
from workflows.state import RunState

AGENT_STEP_EVERY = 10
"""The AgentStep search attribute is brought up to date at least this often (and whenever the
status changes): a step then costs no search-attribute upsert of its own."""


class Reporter:
    def __init__(self, state: RunState, stream: WorkflowStream) -> None:
        self._state = state
        self._events = stream.topic(EVENTS_TOPIC, type=AgentEvent)
        self.behaviours = versioning.LEGACY
        """Set by the run from its history before the first status (see versioning)."""
        self.status: AgentStatus = "running"
        self.details = "starting"
        self._step_reported = 0
        self._reported_calls: set[str] = set()
        """Calls of the reply being run whose tool_call_finished event is out already."""

    def publish(self, kind: AgentEventKind, **fields: Any) -> None:
        """Append an event to the run's progress stream (workflow state; no history event)."""
        fields.setdefault("step", self._state.steps)
        self._events.publish(AgentEvent(kind=kind, at=workflow.now(), **fields))

    def set_status(self, status: AgentStatus, details: str) -> None:
        """Keep the search attributes, the current details and the `status` query saying what
        the run is doing."""
        steps = self._state.steps
        if self.behaviours.coarse_step_attribute:
            step_due = steps - self._step_reported >= AGENT_STEP_EVERY
        else:
            step_due = status == self.status == "running"
        changed = status != self.status or details == "starting" or step_due
        if self.behaviours.reports_status and changed:
            workflow.upsert_search_attributes(
                [AGENT_STATUS.value_set(status), AGENT_STEP.value_set(steps)]
            )
            self._step_reported = steps
        self.status = status
        self.details = details
        workflow.set_current_details(details)

    def call_finished(self, outcome: Outcome) -> None:
        """The tool_call_finished event of a call, once per call."""
        record = outcome.record
        if record.id in self._reported_calls:
            return
        self._reported_calls.add(record.id)
        self.publish(
            "tool_call_finished",
            call_id=record.id,
            tool=record.name,
            arguments=record.arguments,
            outcome=record.outcome,
            latency_ms=record.latency_ms,
            attempts=record.attempts,
            text=record.error,
        )

    def reply_done(self) -> None:
        self._reported_calls.clear()
