"""A run's state: one pydantic model of everything a run carries, and the records it is made of.

`RunState` is the live state of a run, not a copy of it. The workflow's modules (budget,
gates, saga, compaction, continuation) read and write its fields, and continue-as-new hands it
on whole, so a new piece of state touches this file and the module that uses it, nothing else.
The records of what people decide (a plan, a tool call's approval, auto mode's rules and
verdicts) are decisions.py's, and a call's tokens and cost usage.py's: the state holds them.
Deterministic data only.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ApplicationError

from . import effect_log
from .bounds import MAX_PAUSED_SECONDS, Recorded
from .decisions import (
    AutoModeChange,
    JudgeVerdict,
    PlanState,
    ToolApproval,
    ToolCallDecision,
)
from .guardrail_data import GuardrailRecord
from .specs import ToolSpec
from .transcript import Message, Transcript, UserMessage
from .usage import Usage


class CompensationInput(BaseModel):
    """What a compensating activity gets: everything about the effect it must undo."""

    tool: str
    tool_call_id: str
    arguments: dict[str, Any]
    """As the model wrote them; {} when they were over MAX_KEPT_ARGUMENT_CHARS of JSON (see
    arguments_kept)."""
    result: Any
    """The tool's own return value (not the bounded text the model saw); None when it was over
    MAX_KEPT_RESULT_CHARS of JSON (see result_kept)."""
    idempotency_key: str
    """The original call's key; derive the undo's own key from it to undo once."""
    outcome_unknown: bool = False
    """The call was cancelled, timed out or failed after it started: its effect may or may not
    have happened, and `result` is None. A compensation must then tolerate an effect that never
    happened (look it up by the idempotency key)."""
    arguments_kept: bool = Field(default=True, exclude_if=lambda kept: kept)
    """False: the arguments were too large to keep (workflows/effect_log.py), and `arguments`
    is {}; find the effect by the idempotency key."""
    result_kept: bool = Field(default=True, exclude_if=lambda kept: kept)
    """False: the return value was too large to keep, and `result` is None; find the effect by
    the idempotency key."""


class AppliedEffect(BaseModel):
    """One entry of the compensation log: a side effect that succeeded, or one whose outcome
    is unknown. Bounded: see `bounded` and workflows/effect_log.py."""

    call: CompensationInput
    compensation: str | None
    outcome_unknown: bool = False
    """Entered the log without a result: see CompensationInput.outcome_unknown."""

    def bounded(self) -> AppliedEffect:
        """This entry, keeping no arguments or value over their bounds (effect_log.py)."""
        kept = effect_log.bounded_call(self.call.model_dump(mode="json"))
        return self.model_copy(update={"call": CompensationInput.model_validate(kept)})

    def log_bytes(self, own_prefix: str) -> int:
        """What this entry adds to the log (effect_log.MAX_LOG_BYTES bounds the sum), its key
        counted without `own_prefix`, the run's own part of its keys."""
        return effect_log.entry_bytes(self.model_dump(mode="json"), own_prefix)


def _pack_effects(effects: list[AppliedEffect]) -> Any:
    if not effects:
        return []
    return effect_log.pack([e.model_dump(mode="json") for e in effects])


EffectLog = Annotated[
    list[AppliedEffect],
    BeforeValidator(effect_log.unpack),
    PlainSerializer(_pack_effects),
]
"""A compensation log, in its compact form on the wire (workflows/effect_log.py); the list of
entries that older runs carried still loads."""


CompensationStatus = Literal["completed", "failed", "not_undone"]


class CompensationRecord(BaseModel):
    """What undoing one side effect came to, as a failed run's details list it
    (FailureDetails.compensations, newest effect first)."""

    tool: str
    tool_call_id: str
    status: CompensationStatus
    """completed or failed (after its retries); not_undone when the tool has no compensation."""
    compensation: str | None = None
    error: str | None = None
    outcome_unknown: bool = False
    """The effect's outcome was unknown when it was undone (see AppliedEffect)."""


ToolOutcome = Literal["ok", "error", "loop_detected", "refused", "denied", "not_run", "compensated"]
"""error: failed, or bad arguments; refused: not offered now (plan mode); denied: a person (or
the approval timeout) said no; not_run: the run was ending; compensated: it succeeded and was
undone when the run failed."""


class ToolCallRecord(BaseModel):
    id: str
    name: str
    arguments: str = ""
    """As the model wrote them (cut at 1,000 characters). Records made before 0.1.0 have none:
    the default lets their runs' results and failures still read."""
    outcome: ToolOutcome
    error: str | None = None
    """What the model was told, when the outcome is not ok (cut at 300 characters)."""
    result_chars: Recorded = 0
    """Size of the result the model saw."""
    truncated: bool = False
    """The tool's output was cut to its bound before the model saw it."""
    externalised: bool = False
    attempts: Recorded = 0
    """Activity attempts; 0 when no activity ran (refused, loop-detected, built-in)."""
    latency_ms: Recorded = 0
    verdict: JudgeVerdict | None = Field(default=None, exclude_if=lambda v: v is None)
    """Auto mode's judge's verdict on the call (its latency and usage included)."""
    script: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """A call a code-mode script made: the id of the run_code call whose script made it (its
    record follows the script's calls in the step's)."""
    guardrail: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """The guardrail that withheld the call's result from the model (docs/guardrails.md)."""


class StepRecord(BaseModel):
    """One model call and what came of it: the run's own trace, one record per step."""

    step: Recorded
    provider: str = ""
    model: str
    messages_sent: Recorded = 0
    model_latency_ms: Recorded
    model_attempts: Recorded = 1
    usage: Usage
    finish_reason: str | None = None
    tool_calls: list[ToolCallRecord] = []
    turn: Recorded | None = None
    """The conversation turn it belongs to; None in a run that is not a conversation."""
    reasoning_left_out: Recorded = Field(default=0, exclude_if=lambda count: not count)
    """Reasoning parts of the transcript this call did not send: another provider's, or refused
    by its settings (see ModelResponse.reasoning_left_out). Left out of the JSON when 0."""
    guardrails: list[GuardrailRecord] = Field(default=[], exclude_if=lambda checks: not checks)
    """The guardrails' verdicts of the step: its input, its tool results, its answer."""


class EarlierSteps(BaseModel):
    """The records a long run no longer keeps, added up (workflows/trace.py): the records of a
    run of any length stay under a bound, and what they told is not lost. Each step's events
    stay in its run's history."""

    up_to_step: Recorded = 0
    """Steps 1 to this one have no record of their own any more."""
    model_latency_ms: Recorded = 0
    model_attempts: Recorded = 0
    usage: Usage = Usage()
    """What those steps' model calls spent (the run's usage covers every step)."""
    tool_calls: dict[str, Recorded] = {}
    """Their tool calls, by outcome."""
    tool_attempts: Recorded = 0
    tool_latency_ms: Recorded = 0
    compactions: Recorded = 0
    """Compaction records no longer kept, and the tokens they removed."""
    tokens_removed: Recorded = 0


class CompactionRecord(BaseModel):
    """One compaction, with both sides of its trade: what it saved, and what it cost
    in prefix cache on the next call."""

    step: Recorded
    """The model call it was made before."""
    policy: Literal["window", "summary"]
    messages_removed: Recorded
    """Messages of the transcript no longer sent, in all (the first message always stays)."""
    tokens_removed: Recorded
    """Estimated input tokens the next call is spared, the note's own tokens deducted."""
    cached_tokens_lost: Recorded | None = None
    """Input tokens of the call before that the next call could have read from cache had the
    transcript only grown, minus those it did read: set once the next call has answered."""


class ToolSelection(BaseModel):
    """Input of the `resolve_tools` activity: the tools a run asks for (None: all)."""

    names: list[str] | None


class RunTools(BaseModel):
    """A run's tools, as specs: its own, and read_result when it did not ask for it (offered
    once a result was externalised)."""

    tools: list[ToolSpec]
    read_result: ToolSpec | None = None
    notices: list[str] = []
    """What the run goes without, in a line each: an optional MCP server that could not be
    reached when its tools were listed, or a listing on continue-as-new that failed (the run
    then keeps the tools it was offered before). Shown by `status`, the trace and the stream."""

    def spec(self, name: str) -> ToolSpec | None:
        found = [s for s in self.tools if s.name == name]
        if found:
            return found[0]
        return self.read_result if self.read_result and self.read_result.name == name else None


TurnOutcome = Literal["working", "answered", "interrupted", "step_limit", "refused"]
"""working: the turn is under way; step_limit: it made `limits.max_steps` model calls without
an answer (the conversation goes on); refused: an input guardrail refused its message."""


class TurnRecord(BaseModel):
    """One turn of a conversation: from a person's message to the agent's answer (or to an
    interrupt, or the turn's step limit)."""

    turn: Recorded
    message: str
    """The message that started it (cut at 1,000 characters)."""
    started_at: datetime
    steps_before: Recorded
    """The conversation's model calls before this turn: the turn's steps are those after."""
    usage_before: Usage
    """The conversation's usage when the turn started."""
    steps: Recorded = 0
    usage: Usage = Usage()
    """What the turn's model calls spent (summaries and sub-agents included)."""
    outcome: TurnOutcome = "working"
    answer: str | None = None
    steering: Recorded = 0
    """Messages that arrived while it worked, appended at a safe point."""
    ended_at: datetime | None = None


class QueuedMessage(BaseModel):
    """A person's message that waits for the next safe point (or starts the next turn)."""

    text: str
    turn: Recorded
    """The turn it belongs to: the working one, or the next one when none works."""
    at: datetime


class ConversationState(BaseModel):
    """A conversation's own state (AgentInput.conversation), carried with the run's."""

    turns: list[TurnRecord] = []
    """The newest MAX_KEPT_TURNS turns (workflows/conversation.py); `earlier_turns` before."""
    earlier_turns: Recorded = 0
    queued: list[QueuedMessage] = []
    ended: str | None = None
    """Why the conversation ends ("ended by the user", "idle for ..."); None while it goes."""
    idle_since: datetime | None = None
    """When the last turn finished: the idle timeout counts from here."""
    kept_effects: Recorded = 0
    """The first this many of `RunState.effects` belong to answered turns and stay when the
    conversation ends; the later ones (an interrupted turn's) are undone."""


CALL_ID_FILTER_BYTES = 2**18 // 8
"""The Bloom filter of a run's older call ids (workflows/call_ids.py): 32 KiB."""


class RunState(BaseModel):
    """Everything a run carries: the workflow keeps its live state here, and continue-as-new
    passes it whole as `AgentInput.carried`. A new field needs a default, so that runs started
    before it existed still load their carried state.

    The field names are the wire format of runs already in flight: rename none."""

    messages: list[Message]
    steps: Recorded
    usage: Usage
    step_records: list[StepRecord]
    started_at: datetime
    paused_seconds: Annotated[float, Field(ge=0, le=MAX_PAUSED_SECONDS, allow_inf_nan=False)]
    last_context_tokens: Recorded | None
    loop_counts: dict[str, Recorded]
    call_ids: list[str]
    effects: EffectLog
    cut: Recorded
    note: UserMessage | None
    compactions: list[CompactionRecord]
    plan: PlanState | None
    externalised: bool
    runs: Recorded
    """Runs so far in this chain, this one included."""
    remembered: dict[str, ToolCallDecision] = {}
    """Per tool: the decision a person asked to remember for the rest of the run."""
    approvals: list[ToolApproval] = []
    """Every call that asked a person, decided or not, oldest first."""
    stream: WorkflowStreamState | None = None
    """The progress stream's events, so subscribers keep their offsets across runs."""
    tools: RunTools | None = None
    """What decides the commands of the run's tools (side effects, approval, timeouts, retries,
    compensation), as the worker reported it when the run started: recorded in the history, so
    replay never reads a worker's registry for it. Descriptions and parameters, which only the
    model reads, come from the registry. None: a run from before they were recorded."""

    older_call_ids: str | None = None
    """Call ids older than the newest MAX_EXACT_CALL_IDS, as a Bloom filter (base64; see
    workflows/call_ids.py). None until the run has that many."""
    earlier_steps: EarlierSteps | None = None
    """The steps whose records are no longer kept, added up (see workflows/trace.py)."""
    tools_listed_in_run: Recorded | None = None
    """The run of the chain (`runs`) whose start listed `tools`: a later run lists them again
    (an MCP server's tools may have changed). None: listed before this was kept."""
    conversation: ConversationState | None = None
    """A conversation's turns and queued messages; None for a run that is not one."""
    auto_mode_change: AutoModeChange | None = Field(
        default=None, exclude_if=lambda change: change is None
    )
    """The operator's last change to the run's auto mode (set_auto_mode): it holds for the rest
    of the run, across continue-as-new."""
    judgements: Recorded = Field(default=0, exclude_if=lambda count: not count)
    """Calls an auto-mode judge was asked about so far (the scripted judge plays its turns by
    this count)."""
    unchecked_inputs: list[str] = Field(default=[], exclude_if=lambda texts: not texts)
    """A person's texts that the input guardrails check with the next model call."""
    guardrail_revisions: Recorded = Field(default=0, exclude_if=lambda count: not count)
    """Answers in a row that an output guardrail sent back to be revised."""

    @model_validator(mode="after")
    def _carried_whole(self) -> RunState:
        # A state another client sends as `carried` is checked as it is decoded, so that a
        # transcript that breaks the pairing rule or a call-id filter of another size fails the
        # run with the reason (AgentInputInvalid), not the workflow task that reads it, forever.
        Transcript(messages=self.messages)
        if self.older_call_ids is not None:
            try:
                size = len(base64.b64decode(self.older_call_ids, validate=True))
            except binascii.Error as error:
                raise ValueError(f"older_call_ids is not base64: {error}") from None
            if size != CALL_ID_FILTER_BYTES:
                raise ValueError(
                    f"older_call_ids has {size} bytes: the filter has {CALL_ID_FILTER_BYTES}"
                )
        return self

    @classmethod
    def start(cls, started_at: datetime) -> RunState:
        """The state of a run that starts from nothing."""
        return cls(
            messages=[],
            steps=0,
            usage=Usage(),
            step_records=[],
            started_at=started_at,
            paused_seconds=0.0,
            last_context_tokens=None,
            loop_counts={},
            call_ids=[],
            effects=[],
            cut=1,
            note=None,
            compactions=[],
            plan=None,
            externalised=False,
            runs=1,
        )

    def failure_details(self) -> FailureDetails:
        return FailureDetails(
            steps=self.steps,
            usage=self.usage,
            step_records=self.step_records,
            earlier_steps=self.earlier_steps,
        )

    def mark_compensated(self, tool_call_id: str) -> None:
        """The trace says so of a call whose effect was undone."""
        for step in self.step_records:
            for index, record in enumerate(step.tool_calls):
                if record.id == tool_call_id:
                    step.tool_calls[index] = record.model_copy(update={"outcome": "compensated"})


class FailureDetails(BaseModel):
    """Carried as the details of a failed run's error, so callers still see what it spent."""

    steps: int
    usage: Usage
    step_records: list[StepRecord] = []
    """The newest steps' records (a long run keeps those under a bound: see earlier_steps)."""
    earlier_steps: EarlierSteps | None = None
    compensations: list[CompensationRecord] = []
    """Newest effect first, in the order the compensations ran."""
    compensations_left_out: dict[str, int] = Field(default={}, exclude_if=lambda left: not left)
    """Compensations past the first saga.MAX_REPORTED_COMPENSATIONS, by status."""
    kept_effects: int = Field(default=0, exclude_if=lambda kept: not kept)
    """A conversation's: the effects of its answered turns, which stayed (the message names
    them)."""
    guardrail: GuardrailRecord | None = Field(default=None, exclude_if=lambda v: v is None)
    """AgentGuardrailTripped's: the guardrail whose tripwire stopped the run, and why."""

    @classmethod
    def of_error(cls, error: BaseException | None) -> FailureDetails:
        """What a failed run's error carried; empty when it carried nothing (a cancellation) or
        something else (a workflow of another kind, asked for as a run's): a failure is read as
        a failure, never as a validation error in the reader."""
        if (
            isinstance(error, ApplicationError)
            and error.details
            and isinstance(error.details[0], dict)
        ):
            try:
                return cls.model_validate(error.details[0])
            except ValidationError:
                pass
        return cls(steps=0, usage=Usage())
