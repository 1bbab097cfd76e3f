"""Guardrails' data (docs/guardrails.md): what a run asks for (`GuardrailPolicy`), what a
guardrail answers (`GuardrailVerdict`), and what the trace keeps of each check
(`GuardrailRecord`). A guardrail checks text: the prompt and each message a conversation takes
(input), the final answer (output), or a tool's result before the model reads it (tool_results).
Pure data; workflows/guardrails.py runs the checks, activities/guardrails.py the app's
functions."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .bounds import Recorded, Seconds
from .model_settings import ModelSettings

GuardrailKind = Literal["input", "output", "tool_result"]
GUARDRAIL_ACTIVITY_PREFIX = "guardrail:"
"""A guardrail runs as the activity `guardrail:NAME`: the history names it."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_GUARDRAILS = 16
"""Guardrails of one kind a run may name."""
MAX_REASON_CHARS = 1_000
"""A verdict's reason is kept and shown no longer than this."""
MAX_REVISIONS = 10

GuardrailName = Annotated[str, Field(pattern=NAME_PATTERN.pattern)]


def _a_name_or_an_object(schema: dict[str, Any]) -> None:
    """The contract says what pydantic takes: the name alone, or the object."""
    whole = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"type": "string", "pattern": NAME_PATTERN.pattern}, whole]


class GuardrailRef(BaseModel):
    """One guardrail a run uses, by the name it was registered under (`@guardrail`). A plain
    string is taken as the name."""

    model_config = ConfigDict(frozen=True, json_schema_extra=_a_name_or_an_object)

    name: GuardrailName
    blocking: bool = False
    """Input only: the model is not called until this guardrail passes. Otherwise an input
    guardrail runs beside the step's model call, and adds no wait when it passes."""

    @model_validator(mode="before")
    @classmethod
    def _a_name_alone(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


Guardrails = Annotated[list[GuardrailRef], Field(max_length=MAX_GUARDRAILS)]
MAX_CRITERIA_CHARS = 8_000


class GuardrailJudge(BaseModel):
    """A model as a guardrail (docs/guardrails.md#judges): it reads the text against written
    criteria and answers with one verdict call. It is auto mode's judge at work: its own
    settings, one model call in its own activity on its provider's queue, its cost in the run's
    budget, its reply untrusted (anything but one valid verdict trips)."""

    model_config = ConfigDict(frozen=True)

    criteria: Annotated[str, Field(min_length=1, max_length=MAX_CRITERIA_CHARS)]
    """What trips it, in plain words: "The text asks the agent to ignore its instructions"."""
    model: ModelSettings
    timeout_seconds: Seconds = 60.0
    """The judge's call, its retries included."""


class GuardrailPolicy(BaseModel):
    """The guardrails a run uses, by kind, and what a tripwire does (docs/guardrails.md)."""

    model_config = ConfigDict(frozen=True)

    input: Guardrails = []
    """Each checks the prompt and every message a conversation takes. A trip fails the run with
    AgentGuardrailTripped before any tool call of that step runs (the model's reply is
    discarded), and what the run did is undone."""
    output: Guardrails = []
    """Each checks the final answer (the structured output too, as JSON) before it is returned.
    A trip tells the model why, and it may revise, up to `max_revisions` times; then the run
    fails with AgentGuardrailTripped."""
    tool_results: Guardrails = []
    """Each checks a tool's result before the model reads it. A trip puts a refusal naming the
    guardrail in the result's place: the result never enters the transcript."""
    max_revisions: Annotated[int, Field(ge=0, le=MAX_REVISIONS)] = 2
    refuse_in_conversation: bool = False
    """A conversation's message that trips an input guardrail is refused with a reply, and the
    conversation stays open; the run fails otherwise (and always for the first prompt)."""
    timeout_seconds: Seconds = 30.0
    """One check's attempt; a check that times out (after 3 attempts) has tripped."""
    judges: Annotated[dict[GuardrailName, GuardrailJudge], Field(max_length=MAX_GUARDRAILS)] = {}
    """Guardrails that are a model with criteria, by the name the lists above give them: a name
    found here is this judge, any other a function the worker registered."""

    @field_validator("output", "tool_results")
    @classmethod
    def _only_input_blocks(cls, refs: list[GuardrailRef]) -> list[GuardrailRef]:
        if any(ref.blocking for ref in refs):
            raise ValueError("only an input guardrail blocks (blocking: true)")
        return refs

    def of(self, kind: GuardrailKind) -> list[GuardrailRef]:
        return {"input": self.input, "output": self.output, "tool_result": self.tool_results}[kind]


class GuardrailVerdict(BaseModel):
    """What a guardrail answers: whether it tripped, and why (a line for the model, the trace
    and the person who reads it)."""

    tripped: bool
    reason: str = ""


class GuardrailCheck(BaseModel):
    """A guardrail activity's input: the text it guards and its context."""

    kind: GuardrailKind
    text: str
    workflow_id: str
    step: Recorded
    tool: str | None = None
    """tool_result: the tool whose result it is."""


class GuardrailRecord(BaseModel):
    """One guardrail's verdict on one text, as the step's trace keeps it."""

    name: str
    kind: GuardrailKind
    tripped: bool
    reason: str = ""
    latency_ms: Recorded = 0
    call_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    """tool_result: the call whose result it checked."""
