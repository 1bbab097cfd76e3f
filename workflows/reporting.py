"""Reporting: what a run tells the world while it goes, without touching its transcript.

Three channels (the static summary and details a run starts with are run_summary.py's):
- the progress stream (`AgentEvent`s, workflow state only, no history event);
- the search attributes AgentStatus, AgentStep, AgentCostUsd and AgentError (each upsert is a
  history event and a visibility write, so they move with the status, every AGENT_STEP_EVERY
  steps, and whenever the run waits or ends with a step or a cost the list does not show yet);
- the current details that the Web UI shows on a run's page, written for its Markdown renderer:
  what the run does or waits for, at which step, what it cost so far, and for a wait the
  handler and the exact input to paste into the UI's update dialog (no command: a query answers
  them).

No transcript content goes into the search attributes. The current details quote what a person
must decide on (a plan's steps, a waiting call's arguments), as the `status` query does; they are
a query answer, so they are encrypted with the payloads when keys are set.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.contrib.workflow_streams import WorkflowStream

from . import shown_arguments
from .activity_io import ModelResponse
from .context import RunContext
from .decisions import JudgeVerdict, ToolApproval
from .events import (
    EVENTS_TOPIC,
    SHOWN_RESULT_CHARS,
    AgentEvent,
    AgentEventKind,
    FirstDecider,
)
from .outcomes import Outcome, count
from .state import StepRecord
from .status import AGENT_COST_USD, AGENT_ERROR, AGENT_STATUS, AGENT_STEP, AgentStatus
from .usage import Usage
from .visible_text import visible

AGENT_STEP_EVERY = 10
"""While a run runs, AgentStep (and AgentCostUsd) is brought up to date at least this often
(and whenever the status changes): a step then costs no search-attribute upsert of its own."""

DETAILS_PLAN_STEPS = 30
"""A waiting plan's steps listed in the current details; the rest are counted."""
DETAILS_STEP_CHARS = 300
DETAILS_CALLS = 10
"""Waiting tool calls listed in the current details, each with its input to paste."""

_HEADLINES: dict[AgentStatus, str] = {
    "running": "Running",
    "awaiting_approval": "Waiting for a person",
    "compensating": "Undoing side effects",
    "completed": "Completed",
    "failed": "Failed",
}
CANCELLED = "cancelled"
"""The details of a cancelled run: its AgentStatus is failed, its execution CANCELED, and the
current details' headline says Cancelled."""
_LAG_NOTE = (
    f"While a run runs, the list's `AgentStep` and `AgentCostUsd` move with its status and "
    f"every {AGENT_STEP_EVERY} steps, so they may lag; whenever it waits or ends they are exact."
)
_SIGNAL_NOTE = (
    "but a signal gets no answer: use the update, which shows whether the decision was taken, "
    "or why not."
)

Explained = tuple[str, str]
"""What the current details say of a wait: the headline's words after "Waiting for a person",
and the Markdown below the step and cost (what to decide, and how)."""


class Reporter:
    def __init__(self, ctx: RunContext, stream: WorkflowStream) -> None:
        self._ctx = ctx
        self._state = ctx.state
        self._events = stream.topic(EVENTS_TOPIC, type=AgentEvent)
        self.status: AgentStatus = "running"
        self.details = "starting"
        self._step_reported = 0
        self._cost_reported: float | None = None
        self._markdown: Explained | None = None
        self._ignored: str | None = None
        """Why the newest decision sent by signal was ignored (a signal cannot be answered)."""
        self._reported_calls: set[str] = set()
        """Calls of the reply being run whose tool_call_finished event is out already."""
        self.scripts: dict[str, str] = {}
        """Calls a code-mode script made, by id: the run_code call that made them, which their
        events name (workflows/code_mode.py)."""

    def publish(self, kind: AgentEventKind, **fields: Any) -> None:
        """Append an event to the run's progress stream (workflow state; no history event)."""
        fields.setdefault("step", self._state.steps)
        if self.scripts and (script := self.scripts.get(fields.get("call_id") or "")):
            fields["script"] = script
        self._events.publish(AgentEvent(kind=kind, at=workflow.now(), **fields))

    def set_status(
        self,
        status: AgentStatus,
        details: str,
        *,
        markdown: Explained | None = None,
        error: str | None = None,
    ) -> None:
        """Keep the search attributes, the current details and the `status` query saying what
        the run is doing. `details` is the line of the `status` query; `markdown`, when given,
        what the current details say about it (else the line itself); `error` the type of the
        error a failed run ends with (AgentError)."""
        steps = self._state.steps
        cost = self._state.usage.cost_usd
        if self._ctx.behaviours.coarse_step_attribute:
            step_due = steps - self._step_reported >= AGENT_STEP_EVERY
        else:
            step_due = status == self.status == "running"
        changed = status != self.status or details == "starting" or step_due
        operators = self._ctx.behaviours.reports_for_operators
        if operators and status != "running":
            # Waiting or ended: the list shows the step and cost of this moment.
            changed = changed or (steps, cost) != (self._step_reported, self._cost_reported)
        if self._ctx.behaviours.reports_status and changed:
            updates: list[SearchAttributeUpdate[Any]] = [
                AGENT_STATUS.value_set(status),
                AGENT_STEP.value_set(steps),
            ]
            if operators:
                updates.append(
                    AGENT_COST_USD.value_unset() if cost is None else AGENT_COST_USD.value_set(cost)
                )
                if error is not None:
                    updates.append(AGENT_ERROR.value_set(error))
            if self._ctx.behaviours.skips_unchanged_upserts:
                # Each upsert is a history event (and a Temporal Cloud action): only changes.
                held = workflow.info().typed_search_attributes
                updates = [u for u in updates if held.get(u.key) != u.value]
            if updates:
                workflow.upsert_search_attributes(updates)
            self._step_reported = steps
            self._cost_reported = cost
        self.status = status
        self.details = details
        self._markdown = markdown
        self._ignored = None
        self._show()

    def decision_ignored(self, reason: str) -> None:
        """A decision sent by signal was refused: the signal's sender cannot be told, so the
        run's page says so until the status next changes."""
        self._ignored = reason
        self._show()

    def _show(self) -> None:
        workflow.set_current_details(
            current_details(
                self.status,
                self.details,
                self._markdown,
                self._state.steps,
                self._state.usage,
                self._ignored,
            )
        )

    def step_finished(self, response: ModelResponse, record: StepRecord) -> None:
        """A model call answered: the stream's event and the worker's log line."""
        calls = response.message.tool_calls
        self.publish(
            "step_finished",
            model=response.model,
            usage=response.usage,
            latency_ms=record.model_latency_ms,
            attempts=response.attempt,
            outcome=response.finish_reason,
            text=", ".join(c.name for c in calls) or None,
        )
        workflow.logger.info(
            "step %d: %s replied (%s) with %d tool calls: %s",
            record.step,
            response.model,
            response.finish_reason,
            len(calls),
            ", ".join(f"{c.name} {c.id}" for c in calls) or "-",
        )

    def call_finished(self, outcome: Outcome, *, checks_follow: bool = False) -> None:
        """The tool_call_finished event of a call, once per call, with an ok call's result
        (cut), or a failed one's error, unless tool-result guardrails will check that result
        after this event: an error is what the model reads of a call too.
        `checks_follow`: the call is one of the reply's, told before their results are
        checked (the event then says how many checks follow, unless none checks it)."""
        record = outcome.record
        if record.id in self._reported_calls:
            return
        self._reported_calls.add(record.id)
        guardrails = self._ctx.input.guardrails
        checking = len(guardrails.tool_results) if guardrails is not None else 0
        shown = record.outcome == "ok" and not checking
        checks = None
        if checking and checks_follow and outcome.handed_back and record.id not in self.scripts:
            checks = checking
        self.publish(
            "tool_call_finished",
            call_id=record.id,
            tool=record.name,
            arguments=record.arguments,
            outcome=record.outcome,
            latency_ms=record.latency_ms,
            attempts=record.attempts,
            text=None if checks else record.error,
            result=outcome.result.content[:SHOWN_RESULT_CHARS] if shown else None,
            checks=checks,
        )

    def reply_done(self) -> None:
        self._reported_calls.clear()

    def asked(self, approval: ToolApproval, first: FirstDecider | None = None) -> None:
        """approval_requested: a call waits for a decision: a person's, or `first` auto mode's
        judge's or a remembered one's (the event's `outcome`)."""
        self.publish(
            "approval_requested",
            call_id=approval.call_id,
            tool=approval.tool,
            arguments=approval.arguments,
            outcome=first,
        )

    def decided(
        self,
        approval: ToolApproval,
        *,
        outcome: str | None = None,
        text: str | None = None,
        verdict: JudgeVerdict | None = None,
    ) -> None:
        """What came of a call that waited, in one shape: approval_decided, with its status
        (unless `outcome` says otherwise) and why; or, given auto mode's `verdict`, judge_verdict,
        with what came of it, the judge's reason, and its own call's latency and usage."""
        more: dict[str, Any] = {}
        if verdict is not None:
            outcome, text = verdict.outcome, verdict.reason
            more = {
                "latency_ms": verdict.latency_ms,
                "usage": verdict.usage,
                "confidence": verdict.confidence,
            }
        self.publish(
            "approval_decided" if verdict is None else "judge_verdict",
            call_id=approval.call_id,
            tool=approval.tool,
            outcome=outcome or approval.status,
            text=text,
            **more,
        )


# --- the current details (Markdown) ---------------------------------------------------------


def current_details(
    status: AgentStatus,
    details: str,
    markdown: Explained | None,
    steps: int,
    usage: Usage,
    ignored: str | None = None,
) -> str:
    """The run's page in the Web UI: a headline with the step and the cost so far, then what
    needs deciding and how (from `markdown`), as Markdown."""
    what, body = markdown or (f": {markdown_text(details)}", "")
    if details == CANCELLED and markdown is None:
        what = ", after undoing its side effects (the execution ends CANCELED)"
    money = "cost so far" if status in ("running", "awaiting_approval") else "cost"
    parts = [
        f"**{'Cancelled' if details == CANCELLED else _HEADLINES[status]}**{what}",
        f"Steps done: {steps} · {money}: {cost_text(usage.cost_usd)}",
    ]
    if body:
        parts.append(body)
    if ignored:
        parts.append(f"**A decision sent by signal was ignored**: {markdown_text(ignored)}")
    if status == "running":
        parts.append(f"_{_LAG_NOTE}_")
    return "\n\n".join(parts)


def plan_markdown(version: int, steps: Sequence[str]) -> Explained:
    """A waiting plan: its steps as a numbered list, and the inputs that decide it."""
    shown = [
        f"{n}. {markdown_text(shortened(step, DETAILS_STEP_CHARS))}"
        for n, step in enumerate(steps[:DETAILS_PLAN_STEPS], start=1)
    ]
    if len(steps) > DETAILS_PLAN_STEPS:
        shown.append(f"\n… and {count(len(steps) - DETAILS_PLAN_STEPS, 'more step')}")
    approve = _json({"approve": True, "version": version})
    reject = _json({"approve": False, "version": version, "comment": "what to change"})
    what = f" to approve plan v{version} ({count(len(steps), 'step')}):"
    return what, "\n\n".join(
        [
            "\n".join(shown),
            "To decide, open **Send an Update**, choose `decide_plan` and paste one of:",
            f"- to approve: {code_span(approve)}\n- to reject, saying what to change: "
            f"{code_span(reject)}",
            "The signals `approve_plan` (input: a comment, as a JSON string such as "
            '`"go ahead"`) and `reject_plan` (the feedback, as a JSON string) do the same, '
            + _SIGNAL_NOTE,
        ]
    )


def calls_markdown(waiting: Sequence[tuple[ToolApproval, bool]], argument_chars: int) -> Explained:
    """Tool calls that wait for a person (each with whether it is a sub-agent's): a numbered
    list with their arguments in code, and the inputs that decide them."""
    lines = []
    for n, (approval, sub_agent) in enumerate(waiting[:DETAILS_CALLS], start=1):
        warning, arguments = shown_arguments.of_approval(approval, argument_chars)
        cut = f" **{warning}**" if warning else ""
        whose = ", a sub-agent's" if sub_agent else ""
        if approval.script:  # a code-mode script's call: the script waits on it
            whose += f", in the script of run_code call {code_span(approval.script)}"
        lines.append(
            f"{n}. {code_span(approval.tool)} (call {code_span(approval.call_id)}{whose}) with "
            f"{code_span(arguments)}{cut}"
        )
        if approval.judging:
            lines.append("   - auto mode's judge is reviewing it; a person may decide it first")
        elif approval.verdict is not None:
            lines.append(f"   - {markdown_text(verdict_line(approval.verdict))}")
    if len(waiting) > DETAILS_CALLS:
        lines.append(f"\n… and {count(len(waiting) - DETAILS_CALLS, 'more call')}")
    first = waiting[0][0].call_id if waiting else "call_1_1"
    approve = _json({"call_id": first, "approve": True})
    deny = _json({"call_id": first, "approve": False, "reason": "why not"})
    what = f" to decide {count(len(waiting), 'tool call')}:"
    return what, "\n\n".join(
        [
            "\n".join(lines),
            "To decide, open **Send an Update**, choose `decide_tool_call` and paste, for "
            "each call (its `call_id` as above):",
            f"- to approve: {code_span(approve)}\n- to deny, with the reason the model reads: "
            f"{code_span(deny)}",
            'Add `"remember": true` to decide the same way for this tool\'s later calls in the '
            "run. The signal `decide_tool_call` takes the same input, " + _SIGNAL_NOTE,
        ]
    )


def guardrail_lines(records: Sequence[StepRecord]) -> list[str]:
    """What the guardrails did (docs/guardrails.md), as `durable-agent trace` and the console
    show it: a line for each that tripped, and those that passed counted, by guardrail."""
    checks = [(r.step, g) for r in records for g in r.guardrails]
    passed = Counter(f"{g.name} ({g.kind})" for _, g in checks if not g.tripped)
    lines = [
        f"guardrail {g.name} tripped ({g.kind}, step {step}{f', {g.call_id}' if g.call_id else ''}"
        f", {g.latency_ms}ms): {shortened(g.reason, 200)}"
        for step, g in checks
        if g.tripped
    ]
    counted = ", ".join(f"{name} x{n}" for name, n in passed.items())
    return lines + ([f"guardrails passed: {counted}"] if passed else [])


def verdict_line(verdict: JudgeVerdict) -> str:
    """One line for people: what the judge said, and what came of it."""
    said = (
        f"{verdict.decision} (confidence {verdict.confidence:.2f})"
        if verdict.decision is not None and verdict.confidence is not None
        else "no verdict"
    )
    unsure = (
        verdict.decision in ("approve", "deny")
        and verdict.outcome == "escalated"
        and verdict.confidence is not None
    )
    why = f", under the criteria's {verdict.min_confidence:.2f}" if unsure else ""
    taken = {
        "approved": "approved",
        "denied": "denied",
        "escalated": "a person decides",
        "late": "came after the call was decided: ignored",
    }[verdict.outcome]
    return f"judge ({verdict.criteria}): {said}{why}: {taken}: {verdict.reason}"


def judged_markdown(approval: ToolApproval, verdict: JudgeVerdict, argument_chars: int) -> str:
    """A call auto mode's judge decided, for the run's page (each argument's value cut at
    `argument_chars`, as calls_markdown cuts a waiting call's)."""
    return "\n\n".join(
        [
            f"{code_span(approval.tool)} (call {code_span(approval.call_id)}) with "
            f"{code_span(shown_arguments.of_approval(approval, argument_chars)[1])}",
            f"- {markdown_text(verdict_line(verdict))} (in {verdict.latency_ms} ms)",
        ]
    )


def cost_text(cost: float | None) -> str:
    """A cost for the Markdown renderer (its `$` escaped: two of them would be math)."""
    return "unknown (a model call of this run has no price)" if cost is None else f"\\${cost:.4f}"


def code_span(text: str) -> str:
    """`text` as a Markdown code span, which the renderer shows as it is (straight quotes, no
    emphasis): the fence is longer than any run of backticks inside. What is not printable is
    its escape, which in a JSON string to paste is the same character (`\u202e`)."""
    text = visible(" ".join(text.splitlines()))
    longest = run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_MARKDOWN_SPECIAL = set("\\`*_[]<>#|~$")
"""Escaped in plain text; `$` too, since the Web UI's renderer reads `$...$` as math."""


def markdown_text(text: str) -> str:
    """Plain text for the Markdown renderer: one line, its special characters escaped, and
    what is not printable (a bidi override that would reorder it) as its escape."""
    line = visible(" ".join(text.splitlines()))
    return "".join(f"\\{c}" if c in _MARKDOWN_SPECIAL else c for c in line)


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)


def shortened(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, its end cut to an ellipsis when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
