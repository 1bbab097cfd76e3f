"""The inputs and results of the model call and tool activities, and the progress a streaming
model call reports: pure data, shared by the workflow and the activities."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .model_settings import ModelSettings
from .specs import DEFAULT_MAX_RESULT_CHARS, ToolSpec
from .transcript import AssistantMessage, Message
from .usage import Usage


class ModelRequest(BaseModel):
    settings: ModelSettings
    system: str | None
    messages: list[Message]
    tools: list[ToolSpec]
    step: int
    purpose: Literal["step", "summary", "judge"] = "step"
    """"summary": a compaction asks the model to summarise part of the transcript; "judge": an
    auto-mode judge is asked for its verdict on a call (workflows/judge.py)."""
    judgement: int = Field(default=0, exclude_if=lambda count: not count)
    """A judge's request: which call the run has asked a judge about (1, 2, ...); the scripted
    judge plays that turn of its script."""
    tool_choice: str | None = Field(default=None, exclude_if=lambda name: name is None)
    """The tool the model must call (a judge's `verdict`); None: the model chooses."""
    deltas_withheld: bool = Field(default=False, exclude_if=lambda withheld: not withheld)
    """The run has output guardrails, which read its answer before anyone else may: the call
    streams from the provider when its settings say so (a long reply may need it), but
    publishes nothing as it writes (docs/guardrails.md)."""
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


class ScriptCallResult(BaseModel):
    """What one of a script's calls came to, as the script gets it back."""

    call_id: int
    """The sandbox's id of the call (ScriptCall.call_id)."""
    value: Any = None
    """The result as data: the tool's text parsed as JSON when it is JSON, else the text."""
    error: str | None = None
    """Set when the call did not come back ok: the text the model would have read. The script
    gets it as an exception of `error_type`."""
    error_type: Literal["PermissionError", "RuntimeError"] = "RuntimeError"
    """PermissionError: a person (or the judge, or the approval timeout) denied the call;
    RuntimeError: anything else that kept it from an ok result."""


class ScriptLegInput(BaseModel):
    """One leg of a code-mode script (activities/scripts.py): from its start, or from its saved
    state with the results of the calls it waited on, to its next calls or its end."""

    tool_call_id: str
    """The run_code call whose script this is."""
    step: int = 0
    code: str | None = None
    """The script, for its first leg; None for the legs that resume it."""
    snapshot: str | None = None
    """The sandbox's saved state, base64 of its compressed dump, when small enough to carry."""
    snapshot_ref: str | None = None
    """Where the saved state is kept in the result store, when it was too large to carry."""
    results: list[ScriptCallResult] = []
    tools: list[str] = []
    """The functions the script may call: the run's tools, by name."""
    max_cpu_seconds: float = 5.0
    max_memory_bytes: int = 64 * 1024 * 1024
    max_calls: int = 100
    """CodeMode.max_calls: the calls the whole script may make."""
    calls_made: int = 0
    """The calls it made in earlier legs."""
    output_chars_left: int = DEFAULT_MAX_RESULT_CHARS
    """What is left of CodeMode.max_output_chars: what the leg prints past it is counted only."""


class ScriptCall(BaseModel):
    """A call the script made, which waits for its result."""

    call_id: int
    """The sandbox's id of the call; the result goes back under it."""
    name: str
    arguments: dict[str, Any]


class ScriptLeg(BaseModel):
    """Where one leg left a script: waiting on calls (with its saved state), done, or stopped."""

    status: Literal["waiting", "done", "stopped"]
    calls: list[ScriptCall] = []
    """waiting: the calls to run before the next leg, as one batch."""
    snapshot: str | None = None
    snapshot_ref: str | None = None
    printed: str = ""
    """What the leg printed, at most `output_chars_left` of it."""
    printed_left_out: int = 0
    """Characters printed past that."""
    value: str | None = None
    """done: the value of the script's last expression, as text (None: it had none)."""
    reason: str | None = None
    """stopped: why, in one line (an exception the script did not catch, a limit)."""
    cpu_seconds: float = 0.0
    """The leg's time in the sandbox."""
    not_awaited: int = 0
    """done: calls the script started but never awaited, which did not run."""
