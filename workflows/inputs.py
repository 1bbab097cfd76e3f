"""What a run is given and what it answers: `AgentInput` with its settings (the model's, from
model_settings.py; the limits, the approval policy, a fork's seed), and `AgentResult`. Pure
data, the workflow's wire format: add fields with defaults, rename none."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .bounds import (
    MAX_SCRIPT_CALLS,
    MAX_SCRIPT_MEMORY,
    MAX_SCRIPT_SECONDS,
    MIN_SCRIPT_MEMORY,
    Count,
    Dollars,
    ResultChars,
    Seconds,
    Steps,
    Tokens,
)
from .decisions import AutoRules, PlanState, ToolCallDecision
from .guardrail_data import GuardrailPolicy
from .model_settings import ModelSettings
from .specs import DEFAULT_MAX_RESULT_CHARS, ToolSpec
from .state import CompactionRecord, EarlierSteps, EffectLog, RunState, StepRecord, TurnRecord
from .transcript import AssistantMessage, Message, Transcript
from .usage import Usage

DEFAULT_TASK_QUEUE = "agent-loop"


class Limits(BaseModel):
    """Hard stops. Exhausting any fails the run loudly; there is never a partial answer."""

    max_steps: Steps = 20
    """Model calls."""
    max_context_tokens: Tokens | None = None
    """Input tokens the next model call would send: the provider-reported input of the last call
    plus an estimate of what was appended since."""
    max_total_tokens: Tokens | None = None
    """Input plus output tokens, summed over the run."""
    max_wall_seconds: Seconds | None = None
    max_cost_usd: Dollars | None = None
    """Summed over the run; a run whose model has no price cannot be held to it, and fails."""


class AutoMode(AutoRules):
    """Auto-mode approvals: a judge model reads a gated call against written criteria and
    approves or denies it, or hands it to a person. It fails closed: a verdict under the
    criteria's `min_confidence`, an escalation, a reply that is not one valid `verdict` call,
    the judge's error or timeout, and a tool without criteria all wait for a person as if auto
    mode were off (docs/people-in-the-loop.md#auto-mode)."""

    judge: ModelSettings
    """The judge's model: its own provider, model, timeout and retries (the scripted provider
    plays it from its own `script`, one turn per call judged)."""
    timeout_seconds: Seconds = 300.0
    """How long a judgement may take in all, retries and a wait for a worker of its provider
    included; past it the call goes to a person."""


class ToolApprovalPolicy(BaseModel):
    """Which calls of tools that need approval run without asking a person; the rest wait.

    A call is approved without asking when `approve_all` is set, when its tool is on `allow`,
    or when any of the `predicates` (functions registered with `@approval_predicate`, named
    here) accepts its arguments. Tools that need no approval never wait. With `auto_mode`, the
    calls left are judged by a model against written criteria first, and only those it is not
    sure of wait for a person.
    """

    approve_all: bool = False
    """For trusted batch jobs: no call waits."""
    allow: list[str] = []
    """Tools whose calls are approved without asking."""
    predicates: list[str] = []
    """Registered approval predicates; a call that any of them accepts is approved."""
    auto_mode: AutoMode | None = Field(default=None, exclude_if=lambda mode: mode is None)
    """A judge for the calls that would wait for a person (left out of the JSON when unset, so a
    run without it keeps the history bytes it had)."""


class ForkOrigin(BaseModel):
    """Where a fork starts: the run it was forked from, at which step, and what it inherits."""

    workflow_id: str
    run_id: str
    """The run of that workflow's chain that made step `step` (its first run for step 0)."""
    step: Count
    """The fork's transcript is the original's through the tool results of this step."""
    usage: Usage = Usage()
    """What the original's steps 1..step cost: the fork did not pay for them again."""
    effects: EffectLog = []
    """The original's side effects in those steps. Inherited: the fork never undoes them."""
    undone: list[str] = Field(default=[], exclude_if=lambda undone: not undone)
    """The calls of those steps whose effects the original undid later (it failed or was
    cancelled): not inherited, since they are not in place; the fork's transcript says so in
    their results."""
    call: str | None = Field(default=None, exclude_if=lambda call: call is None)
    """A fork inside step `step`'s script, at this call of it (`script_1.3`): the transcript
    ends with that step's reply, and the calls before this one are inherited too."""


class ScriptResume(BaseModel):
    """A fork inside a script (forking.py, code_mode.py): step `origin.step`'s reply, given
    rather than asked for, and the leg its run_code script resumes from: the batch's calls
    before `origin.call` keep the original's results; that one and the rest run afresh."""

    reply: AssistantMessage
    """The original's reply at step `origin.step`: one call, run_code."""
    leg: dict[str, Any]
    """The leg that asked for the batch (activity_io.ScriptLeg as JSON): its calls and state."""
    inherited: list[dict[str, Any]] = []
    """The script's results of the batch's calls before `origin.call` (ScriptCallResult)."""
    calls_made: Count = 0
    """The calls the script made before the batch."""
    printed: str = ""
    printed_left_out: Count = 0
    legs: Count = 1

    @model_validator(mode="after")
    def _one_run_code_call(self) -> ScriptResume:
        if [call.name for call in self.reply.tool_calls] != ["run_code"]:
            raise ValueError("a fork inside a script resumes a reply whose one call is run_code")
        return self


class ForkSeed(BaseModel):
    """A fork's start (see forking.py): its origin and the transcript it begins with."""

    origin: ForkOrigin
    messages: list[Message]
    """The original's transcript through step `origin.step`, read from its history."""
    plan: PlanState | None = None
    """A plan-mode original's plan as steps 1..`origin.step` left it: the last one a person
    decided there. Only an approved one lets the fork change data without planning first."""
    script: ScriptResume | None = Field(default=None, exclude_if=lambda script: script is None)
    """A fork inside a script (`origin.call`): where the script resumes."""

    @model_validator(mode="after")
    def _transcript_whole(self) -> ForkSeed:
        # The original's transcript through a step's tool results: every call answered, so the
        # fork's first model call sends what a provider accepts.
        transcript = Transcript(messages=self.messages)
        if not transcript.is_complete():
            missing = ", ".join(repr(call.id) for call in transcript.pending_calls())
            raise ValueError(f"the fork's transcript has calls without results: {missing}")
        return self


class CallbackTool(BaseModel):
    """A callback tool declared in a run's input, by an app in any language: its body runs on
    the app's client, which answers each call with `answer_callback` (workflows/callbacks.py).
    The same as a Python app's `@callback_tool`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str = Field(min_length=1, max_length=4_000)
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    """JSON Schema of the arguments object: the model is told it, and a call whose arguments do
    not match it goes back to the model as an error, never to the client."""
    result: dict[str, Any] | None = None
    """JSON Schema of the answer: an answer that does not match is refused to its sender."""
    timeout_seconds: float = Field(default=300.0, gt=0, le=31 * 86_400)
    """How long a call waits for its answer; then the model is told it timed out."""
    side_effects: bool = False
    needs_approval: bool | None = None
    """As a tool's: by default a call with side effects waits for a person first."""
    max_result_chars: ResultChars = DEFAULT_MAX_RESULT_CHARS

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            side_effects=self.side_effects,
            timeout_seconds=self.timeout_seconds,
            max_result_chars=self.max_result_chars,
            needs_approval=self.needs_approval,
            callback=True,
            result=self.result,
        )


class CodeMode(BaseModel):
    """Code mode (docs/code-mode.md): the model is offered `run_code`, whose one argument is a
    Python script that calls the run's tools as async functions. Each call in it runs as a
    direct call does (its own activity, approval, trace record and compensation); the script
    runs in a sandbox (pydantic-monty) under these limits, and one that passes one is stopped
    with a one-line reason the model reads."""

    model_config = ConfigDict(frozen=True)

    max_cpu_seconds: Annotated[float, Field(gt=0, le=MAX_SCRIPT_SECONDS, allow_inf_nan=False)] = 5.0
    """The script's execution time in the sandbox, summed over the whole script (the clock
    stops while it waits for its calls)."""
    max_memory_bytes: Annotated[int, Field(ge=MIN_SCRIPT_MEMORY, le=MAX_SCRIPT_MEMORY)] = (
        64 * 1024 * 1024
    )
    """The sandbox's heap, at most."""
    max_calls: Annotated[int, Field(ge=1, le=MAX_SCRIPT_CALLS)] = 100
    """Tool calls one script may make; the batch that would pass it does not run."""
    max_output_chars: ResultChars = DEFAULT_MAX_RESULT_CHARS
    """What the model reads of the script (what it printed, then the value of its last
    expression), cut in the middle past this, like any tool result."""


class AgentInput(BaseModel):
    prompt: str
    label: str | None = None
    """A kind of task (e.g. "order-status"), kept in the run's memo: `stats` groups runs by it."""
    system: str | None = None
    tools: list[str] | None = None
    """Names of registered tools to offer; None offers every registered tool."""
    callback_tools: list[CallbackTool] = Field(
        default=[], max_length=64, exclude_if=lambda tools: not tools
    )
    """Tools whose body runs on the app's client (workflows/callbacks.py), offered beside
    `tools`."""
    output_schema: dict[str, Any] | None = None
    """JSON schema the final answer must satisfy: `finish` takes exactly these arguments."""
    model: ModelSettings = ModelSettings()
    limits: Limits = Limits()
    plan: bool = False
    """Plan mode: the model first submits a plan (read-only tools allowed before it), and the run
    waits, spending nothing, until a person approves or rejects it."""
    approval_timeout_seconds: Seconds = 86_400.0
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
    context and returns only its conclusion. Its usage and cost count against this
    run's budget, and its side effects join this run's compensation log."""
    sub_agent_model: ModelSettings | None = None
    """The model a sub-agent uses; the run's own when None."""
    linear_history: bool = True
    """Model calls name what earlier calls sent by reference instead of carrying the whole
    transcript again, so the event history grows linearly (see workflows/history.py)."""
    continue_as_new_after_steps: Steps | None = None
    """Continue as new after this many steps in one run, besides whenever Temporal suggests it
    (its history is getting long). Always at a step boundary; nothing a caller sees changes."""
    carried: RunState | None = None
    """Set by the run itself when it continues as new: everything it had."""
    conversation: bool = False
    """A conversation (docs/conversations.md): a turn that has answered waits, spending
    nothing, for the person's next message (`send_message`) instead of ending the run;
    `limits.max_steps` applies to each turn, the other limits to the whole conversation. It
    ends with `end_conversation` or after `idle_timeout_seconds` without a message."""
    idle_timeout_seconds: Seconds = 86_400.0
    """A conversation ends after this long without a message (24 hours by default)."""
    fork: ForkSeed | None = None
    """A fork of another run (forking.py): the run begins with that run's transcript through a
    step, counts its limits from there, and runs none of those steps' tools again."""
    heartbeat_timeout_seconds: Seconds | None = 10.0
    """Model, tool and compensation activities heartbeat; an attempt whose worker died is retried
    after this long rather than after its whole start-to-close timeout. None turns it off."""
    remembered_denials: dict[str, ToolCallDecision] = Field(
        default={}, exclude_if=lambda denials: not denials
    )
    """Set by a parent for its sub-agent: the denials a person asked the parent to remember, by
    tool, which hold in the sub-agent too (its calls of those tools are denied without asking,
    with the person's reason). Approvals to remember go in `tool_approval.allow`."""
    code_mode: CodeMode | None = Field(default=None, exclude_if=lambda mode: mode is None)
    """Offer `run_code`: one script over the run's tools (docs/code-mode.md). This and
    `guardrails` are left out of the JSON when unset: a run keeps the history bytes it had."""
    guardrails: GuardrailPolicy | None = Field(default=None, exclude_if=lambda g: g is None)
    """Checks of what comes in, goes out and tools hand back (docs/guardrails.md)."""
    effect_log_room: Count | None = Field(default=None, exclude_if=lambda v: v is None)
    """Set by a parent for its sub-agent: the bytes the parent's compensation log has left
    (effect_log.MAX_LOG_BYTES less what it holds), which the sub-agent's effects join when it
    ends. The sub-agent's log counts its entries as the parent will and is full at this room,
    so the parent's stays bounded however deep the delegation goes. None: a run of its own."""

    @model_validator(mode="after")
    def _carried_holds_a_transcript(self) -> AgentInput:
        # A run continues as new after its first step: what it carries starts with the prompt.
        if self.carried is not None and not self.carried.messages:
            raise ValueError("carried: a run's carried state holds its transcript, which is empty")
        return self

    @property
    def heartbeat_timeout(self) -> timedelta | None:
        seconds = self.heartbeat_timeout_seconds
        return None if seconds is None else timedelta(seconds=seconds)


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
