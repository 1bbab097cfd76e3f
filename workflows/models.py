"""Inputs and outputs of the workflow and its activities: pure data, shared by both sides."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from temporalio.common import SearchAttributeKey

# Tool specs (workflows/specs.py) and the records a run is made of (workflows/state.py) live
# apart, since the run's state carries them; they are re-exported here, where every input and
# output of the loop is.
from durable_agent.workflows.specs import (
    DEFAULT_MAX_RESULT_CHARS as DEFAULT_MAX_RESULT_CHARS,
    RetrySettings as RetrySettings,
    ToolSpec as ToolSpec,
)
from durable_agent.workflows.state import (
    AppliedEffect as AppliedEffect,
    ApprovalStatus as ApprovalStatus,
    CompactionRecord as CompactionRecord,
    CompensationInput as CompensationInput,
    CompensationRecord as CompensationRecord,
    CompensationStatus as CompensationStatus,
    ConversationState as ConversationState,
    DecidedBy as DecidedBy,
    EarlierSteps as EarlierSteps,
    EffectLog as EffectLog,
    FailureDetails as FailureDetails,
    PlanState as PlanState,
    QueuedMessage as QueuedMessage,
    RunState as RunState,
    RunTools as RunTools,
    ShownField as ShownField,
    StepRecord as StepRecord,
    ToolApproval as ToolApproval,
    ToolCallDecision as ToolCallDecision,
    ToolCallRecord as ToolCallRecord,
    ToolOutcome as ToolOutcome,
    ToolSelection as ToolSelection,
    TurnOutcome as TurnOutcome,
    TurnRecord as TurnRecord,
    Usage as Usage,
)
from durable_agent.workflows.transcript import AssistantMessage, Message

DEFAULT_TASK_QUEUE = "agent-loop"

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
"""running, awaiting_approval, compensating, completed or failed: find runs waiting on a person
with `temporal workflow list --query "AgentStatus='awaiting_approval'"`."""
AGENT_STEP = SearchAttributeKey.for_int("AgentStep")
"""Model calls made so far: exact whenever the run waits or has ended; while it runs, it moves
with the status and at least every 10 steps (workflows/reporting.py)."""
AGENT_COST_USD = SearchAttributeKey.for_float("AgentCostUsd")
"""US dollars spent so far, on the same schedule as AgentStep, a sub-agent's cost included
once it ended; unset while a model call of the run has no price. `AgentCostUsd > 1`."""
AGENT_ERROR = SearchAttributeKey.for_keyword("AgentError")
"""The error type a failed run ended with (AgentStepLimitExceeded, AgentBudgetExceeded, ...)."""
SEARCH_ATTRIBUTES = (AGENT_STATUS, AGENT_STEP, AGENT_COST_USD, AGENT_ERROR)

AgentStatus = Literal["running", "awaiting_approval", "compensating", "completed", "failed"]


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(frozen=True)

    input: float
    cached_input: float
    cache_write: float = 0.0
    output: float


class ScriptedCall(BaseModel):
    name: str
    arguments: dict[str, Any] | str = {}
    """An object, or a raw text to play a model that writes invalid JSON."""
    id: str | None = None
    """Defaults to a deterministic id from the turn and position."""


class ScriptedTurn(BaseModel):
    """One reply of the scripted model."""

    text: str | None = None
    """Reply text. `{last_tool_result}` is replaced by the newest tool result's content, and
    `{last_tool_result.key}` by one key of it when it is a JSON object."""
    calls: list[ScriptedCall] = []
    expect: str | None = None
    """A text the messages since the model's previous reply must contain; the scripted model
    fails the run (non-retryably) when they do not, so a test sees where it left the script."""
    usage: Usage | None = None
    """Reported usage; by default input is estimated from the request and output from the reply."""
    delay_seconds: float = Field(default=0.0, ge=0)
    """How long the scripted model takes to reply: a real model's latency, for benchmarks."""


Provider = Literal["scripted", "openai", "openai-responses", "anthropic"]
"""`openai` is Chat Completions (OpenAI and OpenAI-compatible servers); `openai-responses` is
OpenAI's Responses API, stateless, with encrypted reasoning (docs/providers.md)."""

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
REASONING_EFFORTS: dict[str, tuple[str, ...]] = {
    "openai-responses": ("none", "minimal", "low", "medium", "high", "xhigh"),
    "anthropic": ("low", "medium", "high", "xhigh", "max"),
}
"""The efforts each provider takes (Anthropic's is `output_config.effort`)."""
MIN_THINKING_BUDGET = 1024
"""Anthropic's smallest `budget_tokens`."""


class ModelSettings(BaseModel):
    provider: Provider = "scripted"
    model: str = "scripted-demo"
    script: list[ScriptedTurn] = []
    """The scripted provider's conversation (ignored by real providers)."""
    timeout_seconds: float = 120.0
    retry: RetrySettings = RetrySettings(maximum_attempts=5)
    temperature: float | None = None
    max_output_tokens: int | None = None
    """Required by Anthropic; defaults to 4096 there."""
    price: Price | None = None
    """Overrides the price table for this run's model."""
    thinking_budget_tokens: int | None = Field(default=None, exclude_if=lambda v: v is None)
    """Anthropic extended thinking: the tokens the model may think for before it answers (at
    least 1024, and less than max_output_tokens; with no max_output_tokens the call allows the
    budget plus 4096). Its thinking blocks are kept, signed, and sent back."""
    adaptive_thinking: bool = Field(default=False, exclude_if=lambda v: not v)
    """Anthropic adaptive thinking: the model decides whether and how much to think (models
    that offer it). Not with thinking_budget_tokens."""
    reasoning_effort: ReasoningEffort | None = Field(default=None, exclude_if=lambda v: v is None)
    """How hard a reasoning model thinks: `reasoning.effort` for openai-responses (none,
    minimal, low, medium, high, xhigh), `output_config.effort` for anthropic (low, medium,
    high, xhigh, max). (The reasoning settings are left out of the JSON when unset, so a run
    without them keeps the history bytes it had.)"""

    stream: bool = Field(default=False, exclude_if=lambda v: not v)
    """Use the provider's streaming API: the text (and reasoning summaries) as the model writes
    them reach `AgentRun.deltas()` through the model activity's heartbeats, never the history;
    the transcript gets the assembled message, as without streaming. The CLI turns it on at a
    terminal. (The scripted model does not stream.)"""

    @model_validator(mode="after")
    def _reasoning_settings_fit(self) -> ModelSettings:
        # Refused here, where the run is built, rather than as the provider's 400 at step 1.
        budget = self.thinking_budget_tokens
        thinking = budget is not None or self.adaptive_thinking
        if thinking and self.provider != "anthropic":
            raise ValueError(
                f"thinking_budget_tokens and adaptive_thinking are Anthropic's (provider is "
                f"{self.provider!r}); OpenAI reasoning models take reasoning_effort with "
                "provider 'openai-responses'"
            )
        if budget is not None:
            if self.adaptive_thinking:
                raise ValueError("give thinking_budget_tokens or adaptive_thinking, not both")
            if budget < MIN_THINKING_BUDGET:
                raise ValueError(
                    f"thinking_budget_tokens={budget}: Anthropic needs at least "
                    f"{MIN_THINKING_BUDGET}"
                )
            if self.max_output_tokens is not None and self.max_output_tokens <= budget:
                raise ValueError(
                    f"max_output_tokens={self.max_output_tokens} must be greater than "
                    f"thinking_budget_tokens={budget}: thinking counts against max_tokens"
                )
        if thinking and self.temperature not in (None, 1.0):
            raise ValueError(
                f"temperature={self.temperature:g} cannot be set with Anthropic thinking (only "
                "1, the default, is allowed): leave temperature unset"
            )
        effort = self.reasoning_effort
        if effort is not None:
            allowed = REASONING_EFFORTS.get(self.provider)
            if allowed is None:
                raise ValueError(
                    f"reasoning_effort is for provider 'openai-responses' or 'anthropic' "
                    f"(provider is {self.provider!r})"
                )
            if effort not in allowed:
                raise ValueError(
                    f"reasoning_effort={effort!r} is not one that {self.provider} takes: "
                    + ", ".join(allowed)
                )
            reasoning = self.provider == "openai-responses" and effort != "none"
            if reasoning and self.temperature is not None:
                raise ValueError(
                    "temperature cannot be set with reasoning_effort: OpenAI's reasoning "
                    "models refuse it (reasoning_effort='none' allows it on models that "
                    "offer it)"
                )
        return self


class Limits(BaseModel):
    """Hard stops. Exhausting any fails the run loudly; there is never a partial answer."""

    max_steps: int = Field(default=20, ge=1)
    """Model calls."""
    max_context_tokens: int | None = None
    """Input tokens the next model call would send: the provider-reported input of the last call
    plus an estimate of what was appended since."""
    max_total_tokens: int | None = None
    """Input plus output tokens, summed over the run."""
    max_wall_seconds: float | None = None
    max_cost_usd: float | None = None
    """Summed over the run; a run whose model has no price cannot be held to it, and fails."""


class ToolApprovalPolicy(BaseModel):
    """Which calls of tools that need approval run without asking a person; the rest wait.

    A call is approved without asking when `approve_all` is set, when its tool is on `allow`,
    or when any of the `predicates` (functions registered with `@approval_predicate`, named
    here) accepts its arguments. Tools that need no approval never wait.
    """

    approve_all: bool = False
    """For trusted batch jobs: no call waits."""
    allow: list[str] = []
    """Tools whose calls are approved without asking."""
    predicates: list[str] = []
    """Registered approval predicates; a call that any of them accepts is approved."""


class ForkOrigin(BaseModel):
    """Where a fork starts: the run it was forked from, at which step, and what it inherits."""

    workflow_id: str
    run_id: str
    """The run of that workflow's chain that made step `step` (its first run for step 0)."""
    step: int = Field(ge=0)
    """The fork's transcript is the original's through the tool results of this step."""
    usage: Usage = Usage()
    """What the original's steps 1..step cost: the fork did not pay for them again."""
    effects: EffectLog = []
    """The original's side effects in those steps. Inherited: the fork never undoes them."""


class ForkSeed(BaseModel):
    """A fork's start (see forking.py): its origin and the transcript it begins with."""

    origin: ForkOrigin
    messages: list[Message]
    """The original's transcript through step `origin.step`, read from its history."""
    plan: PlanState | None = None
    """A plan-mode original's plan as steps 1..`origin.step` left it: the last one a person
    decided there. Only an approved one lets the fork change data without planning first."""


class AgentInput(BaseModel):
    prompt: str
    label: str | None = None
    """A name for the kind of task (e.g. "order-status"): `starter.py stats` groups runs by it.
    Kept in the run's memo, so listing runs shows it."""
    system: str | None = None
    tools: list[str] | None = None
    """Names of registered tools to offer; None offers every registered tool."""
    output_schema: dict[str, Any] | None = None
    """JSON schema the final answer must satisfy: `finish` takes exactly these arguments."""
    model: ModelSettings = ModelSettings()
    limits: Limits = Limits()
    plan: bool = False
    """Plan mode: the model first submits a plan (read-only tools allowed before it), and the run
    waits, spending nothing, until a person approves or rejects it."""
    approval_timeout_seconds: float = Field(default=86_400.0, gt=0)
    """How long a plan may wait for its decision before the run fails (AgentApprovalTimeout),
    and how long a tool call may wait for its decision before it is denied."""
    tool_approval: ToolApprovalPolicy = ToolApprovalPolicy()
    """Which calls run without a person's approval; by default side-effecting ones wait."""
    compaction: Literal["none", "window", "summary"] = "none"
    """When the next call would exceed `limits.max_context_tokens`: "window" drops the oldest
    tool-call groups whole, "summary" replaces them with a model-made summary; both leave a
    visible note. "none" fails the run at the limit instead."""
    compaction_target_ratio: float = Field(default=0.6, gt=0, lt=1)
    """A compaction shrinks the context to this share of max_context_tokens, so that it does not
    have to happen again at the very next step (each one costs the prefix cache)."""
    externalise_results: bool = True
    """A result over its tool's bound is kept whole in the worker's result store; the model sees
    both ends, the size and a reference, and is offered read_result to page through it. False:
    the middle is cut and gone."""
    sub_agents: bool = False
    """Offer the built-in `delegate(task, tools)`: a subtask runs as a child workflow with a fresh
    context and returns only its conclusion (seed 001). Its usage and cost count against this
    run's budget, and its side effects join this run's compensation log."""
    sub_agent_model: ModelSettings | None = None
    """The model a sub-agent uses; the run's own when None."""
    linear_history: bool = True
    """Model calls name what earlier calls sent by reference instead of carrying the whole
    transcript again, so the event history grows linearly (see workflows/history.py)."""
    continue_as_new_after_steps: int | None = Field(default=None, gt=0)
    """Continue as new after this many steps in one run, besides whenever Temporal suggests it
    (its history is getting long). Always at a step boundary; nothing a caller sees changes."""
    carried: RunState | None = None
    """Set by the run itself when it continues as new: everything it had."""
    conversation: bool = False
    """A conversation (docs/conversations.md): a turn that has answered waits, spending
    nothing, for the person's next message (`send_message`) instead of ending the run;
    `limits.max_steps` applies to each turn, the other limits to the whole conversation. It
    ends with `end_conversation` or after `idle_timeout_seconds` without a message."""
    idle_timeout_seconds: float = Field(default=86_400.0, gt=0)
    """A conversation ends after this long without a message (24 hours by default)."""
    fork: ForkSeed | None = None
    """A fork of another run (forking.py): the run begins with that run's transcript through a
    step, counts its limits from there, and runs none of those steps' tools again."""
    heartbeat_timeout_seconds: float | None = Field(default=10.0, gt=0)
    """Model, tool and compensation activities heartbeat; an attempt whose worker died is retried
    after this long rather than after its whole start-to-close timeout. None turns it off."""
    remembered_denials: dict[str, ToolCallDecision] = Field(
        default={}, exclude_if=lambda denials: not denials
    )
    """Set by a parent for its sub-agent: the denials a person asked the parent to remember, by
    tool, which hold in the sub-agent too (its calls of those tools are denied without asking,
    with the person's reason). Approvals to remember go in `tool_approval.allow`."""
    effect_log_room: int | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)
    """Set by a parent for its sub-agent: the bytes the parent's compensation log has left
    (effect_log.MAX_LOG_BYTES less what it holds), which the sub-agent's effects join when it
    ends. The sub-agent's log counts its entries as the parent will and is full at this room,
    so the parent's stays bounded however deep the delegation goes. None: a run of its own."""

    @property
    def heartbeat_timeout(self) -> timedelta | None:
        seconds = self.heartbeat_timeout_seconds
        return None if seconds is None else timedelta(seconds=seconds)


class PlanDecision(BaseModel):
    """Input of the `decide_plan` update."""

    approve: bool
    version: int | None = None
    """The plan version decided on; a decision on an older version is refused. None: the one
    waiting."""
    comment: str | None = None
    """With an approval, a note for the model; with a rejection, the feedback (required)."""


class ModelRequest(BaseModel):
    settings: ModelSettings
    system: str | None
    messages: list[Message]
    tools: list[ToolSpec]
    step: int
    purpose: Literal["step", "summary"] = "step"
    """"summary": a compaction asks the model to summarise part of the transcript."""
    prefix_ref: str | None = None
    """Names the first `prefix_count` messages, sent by an earlier call: `messages` is the rest
    (see workflows/history.py). None: `messages` is everything."""
    prefix_count: int = 0
    tools_ref: str | None = None
    """Names the tool list an earlier call sent; `tools` is then empty."""
    content_refs: dict[int, str] = {}
    """Tool results and model replies among `messages`, by position, whose text goes by
    reference (it is in the history already, as the activity's result that brought it): their
    content is empty here."""
    script_ref: str | None = None
    """Names the scripted provider's script an earlier call sent; `settings.script` is then
    empty (it is the same for every call of a run, and long for long runs)."""


class ModelResponse(BaseModel):
    message: AssistantMessage
    usage: Usage
    model: str
    finish_reason: str | None = None
    attempt: int = 1
    """Which attempt of the model activity produced this reply."""
    response_id: str | None = None
    """The provider's id of this reply (OpenAI's chatcmpl-..., Anthropic's msg_...), for tracing."""
    reasoning_left_out: int = Field(default=0, exclude_if=lambda count: not count)
    """Reasoning parts in the transcript this call did not send: made by another provider or
    API, or refused by this call's settings (Anthropic with thinking off)."""


STREAM_KEPT_CHARS = 32_000
"""The newest characters of each kind a streaming call's heartbeat carries: enough for a reader
polling every 100 ms, bounded whatever the reply's length."""


class StreamProgress(BaseModel):
    """What a streaming model call has written so far: the details of its heartbeats. Each
    heartbeat carries all of it (up to STREAM_KEPT_CHARS a kind), so a reader that missed one
    misses nothing; heartbeats are no history events."""

    step: int
    attempt: int
    text: str = ""
    """The newest text written, after `text_offset` characters no longer carried."""
    text_offset: int = 0
    reasoning: str = ""
    """The newest reasoning summary (or summarised thinking) written, after reasoning_offset."""
    reasoning_offset: int = 0


class ModelDelta(BaseModel):
    """One piece of a streaming model call's output, as `AgentRun.deltas()` yields it."""

    step: int
    attempt: int
    """The model activity's attempt that wrote it."""
    kind: Literal["text", "reasoning", "void"]
    """"void": the attempt failed, and everything it streamed is void (a UI drops it; the next
    attempt streams anew)."""
    text: str = ""


class ToolActivityInput(BaseModel):
    tool_call_id: str
    arguments: dict[str, Any]
    step: int = 0
    """The step whose model reply asked for this call (for the worker's log lines)."""
    idempotency_key: str
    """Derived from the run and the call id: the same on every retry of this call, and never the
    same for two calls. A side-effecting tool uses it to apply its effect once."""
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    externalise: bool = False
    """Keep a result over max_result_chars whole in the result store, and say so in its text."""
    store_content: bool = False
    """Linear history: keep the result's text in the worker's message store, so that the next
    model call can name it by reference instead of carrying it a second time."""


class ToolActivityResult(BaseModel):
    content: str
    is_error: bool = False
    omitted_chars: int = 0
    """Characters cut from the middle of the result to keep it within its bound."""
    externalised_ref: str | None = None
    """Where the whole result is kept, when it was too large to show."""
    content_ref: str | None = None
    """Set when the text was kept in the message store (see store_content)."""
    value: Any = None
    """The whole result as JSON data, kept only for tools with a compensation (which needs it),
    and only up to MAX_KEPT_RESULT_CHARS (workflows/effect_log.py)."""
    value_kept: bool = Field(default=True, exclude_if=lambda kept: kept)
    """False: the value was over that bound, and `value` is None."""
    attempt: int = 1
    """Which attempt of the tool's activity produced this result."""
    outcome_unknown: bool = Field(default=False, exclude_if=lambda unknown: not unknown)
    """True: a side-effecting tool raised after its body started, with something other than a
    `ToolError` (a ValueError from a reply it could not parse, say), so its effect may be in
    place; the run logs it as outcome unknown, to be undone by its key."""


class AgentResult(BaseModel):
    answer: str
    output: dict[str, Any] | None = None
    """The validated `finish` arguments when the run declared an output schema."""
    steps: int
    usage: Usage
    step_records: list[StepRecord] = []
    """The newest steps' records; a long run adds the older ones up in earlier_steps."""
    earlier_steps: EarlierSteps | None = None
    compactions: list[CompactionRecord] = []
    side_effects: EffectLog = []
    """The run's compensation log: what a parent must undo if it fails after delegating here.
    Bounded (workflows/effect_log.py): each entry keeps small arguments and values only, and
    the log travels in a compact form."""
    tool_notices: list[str] = []
    """What the run went without (`RunTools.notices`): an optional MCP server that was down."""
    turns: list[TurnRecord] = []
    """A conversation's turns, oldest first (the newest MAX_KEPT_TURNS); [] for a run."""
    ended: str | None = None
    """Why a conversation ended: "ended by the user", or its idle timeout."""
    forked_from: ForkOrigin | None = None
    """A fork's origin, with what it inherited. `steps` counts the inherited steps too (the
    fork's own are numbered from `forked_from.step + 1` in `step_records`); `usage` is the
    fork's own, `forked_from.usage` the inherited steps'; `side_effects` are the fork's own."""


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


class AgentEvent(BaseModel):
    """One entry of a run's progress stream, published as it happens (see agent_client.py
    `AgentRun.events`). Fields that do not apply to an event's kind are None."""

    kind: AgentEventKind
    step: int
    """The model call the event belongs to (0 before the first)."""
    at: datetime
    model: str | None = None
    usage: Usage | None = None
    """step_finished: that model call's tokens and cost; completed and failed: the run's."""
    call_id: str | None = None
    tool: str | None = None
    arguments: str | None = None
    """As the model wrote them, cut at 1,000 characters."""
    outcome: str | None = None
    """tool_call_finished: the ToolOutcome; approval_decided: the approval status;
    plan_decided: approved or rejected; compensation: the CompensationStatus."""
    latency_ms: int | None = None
    attempts: int | None = None
    text: str | None = None
    """A line for people: the answer (completed), the error (failed), a retry's reason, a
    person's reason, the plan's steps; a conversation's message (turn_started,
    message_queued, message_delivered) or a turn's answer (turn_finished)."""
    turn: int | None = None
    """A conversation's events of turns and messages: the turn they belong to."""


class TranscriptPageRequest(BaseModel):
    """Input of the `transcript_page` query."""

    start: int = Field(default=0, ge=0)
    max_bytes: int = Field(default=1_000_000, gt=0)
    """The page's messages stop before this many bytes of JSON (one message at least): a query's
    answer may have at most 2 MB."""


class TranscriptPage(BaseModel):
    messages: list[Message]
    start: int
    total: int
    """Messages in the transcript; the next page starts at start + len(messages)."""


class EffectsPageRequest(BaseModel):
    """Input of the `effects_page` query."""

    start: int = Field(default=0, ge=0)
    """An index into the compensation log (0: the oldest effect)."""
    max_bytes: int = Field(default=1_000_000, gt=0)
    """The page's entries stop before this many bytes of JSON (one entry at least)."""


class EffectsPage(BaseModel):
    effects: list[AppliedEffect]
    start: int
    total: int
    """Effects in the log; the next page starts at start + len(effects)."""


class TracePageRequest(BaseModel):
    """Input of the `trace_page` query."""

    start: int = Field(default=0, ge=0)
    """An index into the kept step records (0: the oldest kept)."""
    max_bytes: int = Field(default=1_000_000, gt=0)
    """The page's records stop before this many bytes of JSON (one record at least)."""


class TracePage(BaseModel):
    step_records: list[StepRecord]
    start: int
    total: int
    """Records kept; the next page starts at start + len(step_records)."""
    earlier_steps: EarlierSteps | None = None
    """The steps before the oldest kept record, added up."""
    tool_notices: list[str] = []
    """What the run goes without (`RunTools.notices`): an optional MCP server that was down."""


STATUS_STEP_RECORDS = 20
"""The newest step records the `status` query answers with; `trace_page` pages through all."""


SUB_AGENT_APPROVALS_SIGNAL = "sub_agent_approvals"
"""The signal a sub-agent sends its parent when its calls start or stop waiting for a person."""


class SubAgentApproval(ToolApproval):
    """A tool call that a sub-agent waits on (or waited on), as its parent shows it.

    `call_id` is qualified by the parent's `delegate` call: `call_1_1/call_2_1` is the call
    `call_2_1` of the sub-agent that `call_1_1` started, and the parent's `decide_tool_call`
    takes it so."""

    workflow_id: str
    """The sub-agent run that asked (`<parent workflow id>/<delegate call id>`); its own
    `decide_tool_call` takes the last part of `call_id`."""


class SubAgentReport(BaseModel):
    """Input of the `sub_agent_approvals` signal: the calls of a sub-agent that started waiting
    for a person, and those that stopped (decided, timed out or withdrawn) since its last
    report. Call ids are the sender's own, or qualified for its own sub-agents' calls."""

    workflow_id: str
    """The sub-agent that reports: `<parent workflow id>/<delegate call id>`."""
    approvals: list[SubAgentApproval]


class ConversationStatus(BaseModel):
    """A conversation's part of the `status` query."""

    turn: int
    """The newest turn (working, or finished when the conversation waits)."""
    working: bool
    """A turn is under way; False while the conversation waits for a message."""
    queued: list[QueuedMessage]
    """Messages waiting for the next safe point of the working turn."""
    turns: list[TurnRecord]
    """The newest STATUS_TURNS turns."""
    ended: str | None = None


STATUS_TURNS = 20


class RunStatus(BaseModel):
    """Answer of the `status` query: plain JSON, so `temporal workflow query` prints it."""

    status: AgentStatus
    details: str
    """What the run is doing or waiting for, in a line (also its current details in the UI)."""
    step: int
    usage: Usage
    limits: Limits
    step_records: list[StepRecord]
    """The newest STATUS_STEP_RECORDS steps' records (all kept ones: the `trace_page` query)."""
    earlier_steps: EarlierSteps | None = None
    pending_tool_calls: list[str]
    plan: PlanState | None = None
    approvals: list[ToolApproval] = []
    """Tool calls waiting for a person's decision (status awaiting_approval)."""
    sub_agent_approvals: list[SubAgentApproval] = []
    """Tool calls the run's sub-agent waits on, with call ids qualified by the delegate call:
    decide them here, with the same `decide_tool_call`."""
    tool_notices: list[str] = []
    """What the run goes without (`RunTools.notices`): an optional MCP server that was down."""
    conversation: ConversationStatus | None = None
    """A conversation's turns and queued messages; None for a run that is not one."""


AgentInput.model_rebuild()
