"""What people, apps and auto mode's judge decide for a run, and the waits they decide.

A plan and the decision on it; a tool call that waits for a person (`ToolApproval`), the decision
on it and the judge's verdict; auto mode's criteria and an operator's change to them; a callback
tool's call that waits for an app, and its answer. The gates keep these in the run's state
(state.py) and the handlers take them as input, so they are the wire format of runs in flight:
add fields with defaults, rename none. Pure data.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from .bounds import Recorded, Seconds, Share
from .usage import Usage


class ToolCallDecision(BaseModel):
    """Input of the `decide_tool_call` update and signal."""

    call_id: str
    approve: bool
    reason: str | None = None
    """Why: with a denial, the model sees it in the call's error result."""
    remember: bool = False
    """Apply this decision to every later call of the same tool in this run, and to the calls
    of that tool still waiting."""


class CallbackAnswer(BaseModel):
    """Input of the `answer_callback` update: the result of a callback tool's call, computed on
    a client (workflows/callbacks.py)."""

    call_id: str
    result: Any = None
    """The tool's return value as JSON, checked against the tool's declared result schema."""


class PendingCallback(BaseModel):
    """A callback tool's call that waits for a client to answer it."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    """As the model wrote them, checked against the tool's parameters."""
    step: Recorded
    asked_at: datetime
    timeout_seconds: Seconds
    """It waits this long from `asked_at`; then the model is told it timed out."""


MAX_CRITERIA_CHARS = 4_000
"""Each text of an ApprovalCriteria: the judge reads them all at every call it judges."""


class ApprovalCriteria(BaseModel):
    """Written rules an auto-mode judge applies to one kind of call (see AutoMode)."""

    effect: str = Field(min_length=1, max_length=MAX_CRITERIA_CHARS)
    """What the tool's calls do, in words: "sends an email to a customer"."""
    approve_when: str = Field(default="", max_length=MAX_CRITERIA_CHARS)
    deny_when: str = Field(default="", max_length=MAX_CRITERIA_CHARS)
    escalate_when: str = Field(default="", max_length=MAX_CRITERIA_CHARS)
    """When to hand the call to a person even though the judge could decide it."""
    min_confidence: Share = 0.8
    """A verdict less sure than this goes to a person."""


class AutoRules(BaseModel):
    """Which criteria judge which tool's calls: by name in `tools`, else `default`."""

    criteria: dict[str, ApprovalCriteria] = Field(min_length=1)
    tools: dict[str, str] = {}
    """Tool name -> criteria name."""
    default: str | None = None
    """The criteria of a gated tool not in `tools`; None: such calls go to a person."""

    @model_validator(mode="after")
    def _names_are_criteria(self) -> AutoRules:
        named = {**self.tools, **({"(default)": self.default} if self.default else {})}
        unknown = sorted({name for name in named.values() if name not in self.criteria})
        if unknown:
            raise ValueError(
                f"no criteria named {', '.join(map(repr, unknown))}: the criteria are "
                + ", ".join(map(repr, sorted(self.criteria)))
            )
        return self

    def criteria_for(self, tool: str) -> tuple[str, ApprovalCriteria] | None:
        name = self.tools.get(tool, self.default)
        return None if name is None else (name, self.criteria[name])


class AutoModeChange(BaseModel):
    """An operator's change to a running run's auto mode (the `set_auto_mode` update): turn it
    off for the rest of the run, or replace its rules (the judge stays)."""

    off: bool = False
    rules: AutoRules | None = None

    @model_validator(mode="after")
    def _one_change(self) -> AutoModeChange:
        if self.off == (self.rules is not None):
            raise ValueError('send {"off": true}, or {"rules": {...}} to replace the rules')
        return self


JudgeDecision = Literal["approve", "deny", "escalate"]


JudgeOutcome = Literal["approved", "denied", "escalated", "late"]
"""What came of a verdict: it approved or denied the call, the call went to a person (the judge
escalated, was not sure enough, failed, or gave no valid verdict), or a person had decided the
call while the judge worked (`late`: recorded, ignored)."""


class JudgeVerdict(BaseModel):
    """An auto-mode judge's verdict on one call (workflows/judge.py), as the trace, the events
    and the approval request keep it."""

    criteria: str
    """The criteria it was judged by."""
    decision: JudgeDecision | None = None
    """What the judge said; None when it gave no valid verdict (or failed)."""
    confidence: Share | None = None
    min_confidence: Share
    """The criteria's: a verdict less sure went to a person."""
    reason: str
    """The judge's reason, or why there is no verdict."""
    outcome: JudgeOutcome
    latency_ms: Recorded = 0
    usage: Usage = Usage()
    """The judge's tokens and cost (counted in the run's usage)."""


DecidedBy = Literal["person", "remembered", "timeout", "judge"]


ApprovalStatus = Literal["awaiting_approval", "approved", "denied", "timed_out", "not_run"]
"""not_run: the run ended, or a call before it failed fatally, before it was decided."""


class ShownField(BaseModel):
    """One field of a waiting call's arguments, as a person is shown it
    (workflows/shown_arguments.py)."""

    name: str
    value: str
    """The value as the tool gets it, in JSON, cut at shown_arguments.FIELD_CHARS."""
    chars: Recorded
    """The whole value's length in JSON, in characters (code points, as Python counts them and
    the console does): longer than `value` when it was cut."""


class ToolApproval(BaseModel):
    """A call that waited for a person, and what they decided."""

    call_id: str
    tool: str
    arguments: str
    """What a person is shown: the parsed arguments the tool will get, field by field, each
    value cut on its own, after a NOT SHOWN WHOLE warning when anything is left out
    (shown_arguments.text). Runs recorded before 0.2.0 kept the model's raw text, cut at 1,000
    characters, and no `fields`."""
    fields: list[ShownField] = Field(default=[], exclude_if=lambda fields: not fields)
    """The same, field by field, for a screen to lay out."""
    fields_left_out: Recorded = Field(default=0, exclude_if=lambda left: not left)
    """Fields past shown_arguments.MAX_FIELDS, which neither `arguments` nor `fields` show."""
    parsed_arguments: dict[str, Any] | None = Field(
        default=None, exclude_if=lambda parsed: parsed is None
    )
    """The arguments the tool will get, whole, as data (as a tool or a script takes them):
    what `arguments` shows a person, uncut. None when their JSON is over
    shown_arguments.PARSED_CHARS (the run's transcript has the call whole), and in approvals
    recorded before 0.4.0."""
    step: Recorded
    status: ApprovalStatus = "awaiting_approval"
    reason: str | None = None
    asked_at: datetime
    """When the run asked (a call waits approval_timeout_seconds from then)."""
    decided_by: DecidedBy | None = None
    verdict: JudgeVerdict | None = Field(default=None, exclude_if=lambda v: v is None)
    """Auto mode's judge's verdict on the call, once it has one."""
    judging: bool = Field(default=False, exclude_if=lambda v: not v)
    """An auto-mode judge is reviewing the call: it waits for the judge, not for a person (a
    person may still decide it, and wins)."""
    script: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """A call a code-mode script made (docs/code-mode.md): the id of the run_code call whose
    script made it and waits on it."""


class PlanState(BaseModel):
    version: Recorded
    steps: list[str]
    status: Literal["awaiting_approval", "approved", "rejected"]
    comment: str | None = None


class PlanDecision(BaseModel):
    """Input of the `decide_plan` update."""

    approve: bool
    version: Recorded | None = None
    """The plan version decided on; a decision on an older version is refused. None: the one
    waiting."""
    comment: str | None = None
    """With an approval, a note for the model; with a rejection, the feedback (required)."""
