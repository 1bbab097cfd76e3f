"""What came of one tool call: the result the model reads and the record the trace keeps.

Every result of a call is built here, with the constructor that says what happened (`ok`,
`error`, `refused`, `loop`, `denied`, `not_run`; `withheld`, by a guardrail), so the text a
model gets and the outcome the trace records cannot disagree. Also the bounded quoting of what
the model wrote. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .builtin_tools import LOOP_TOOLS
from .state import ToolCallRecord, ToolOutcome
from .transcript import ToolCall, ToolResult

MAX_QUOTED_CHARS = 200
"""What the model wrote (a tool name, a field, a value, a schema message) is quoted back no
longer than this: it has the original."""
RECORDED_ARGUMENT_CHARS = 1_000
"""Arguments kept in a call's trace record and approval request."""
RECORDED_ERROR_CHARS = 300
MAY_HAVE_TAKEN_EFFECT = "It may have taken effect before it stopped: check before calling it again."
"""What the model is told of a side-effecting call whose outcome is unknown, after why it
stopped: so that it looks before it repeats a charge that may have gone through."""


def bounded(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """`text` quoted back no longer than `limit`, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Outcome:
    result: ToolResult
    record: ToolCallRecord
    fatal: str | None = None
    """Set when the call failed in a way that must end the run."""

    @classmethod
    def ok(cls, call: ToolCall, content: str, **activity: Any) -> Outcome:
        """The call did what it was asked (`activity`: latency_ms, attempts, truncated,
        externalised, as call_record takes them)."""
        return cls._of(call, content, "ok", **activity)

    @classmethod
    def error(
        cls, call: ToolCall, content: str, *, fatal: str | None = None, **activity: Any
    ) -> Outcome:
        """The call ran and failed, or its arguments or reply were wrong: the model can fix it."""
        return cls._of(call, content, "error", fatal=fatal, **activity)

    @classmethod
    def refused(cls, call: ToolCall, content: str) -> Outcome:
        """The tool exists but is not offered now (plan mode)."""
        return cls._of(call, content, "refused")

    @classmethod
    def loop(cls, call: ToolCall, content: str) -> Outcome:
        return cls._of(call, content, "loop_detected")

    @classmethod
    def denied(cls, call: ToolCall, content: str) -> Outcome:
        """A person, or the approval timeout, said no."""
        return cls._of(call, content, "denied")

    @classmethod
    def not_run(cls, call: ToolCall, content: str) -> Outcome:
        """The run was ending (a fatal failure, finish, a limit) before the call's turn."""
        return cls._of(call, content, "not_run")

    @property
    def handed_back(self) -> bool:
        """A result a tool wrote (or failed with), not one the loop wrote itself: what the
        run's tool-result guardrails check."""
        record = self.record
        return record.outcome in ("ok", "error") and record.name not in LOOP_TOOLS

    def withheld(self, guardrail: str, reason: str) -> Outcome:
        """The call's result stopped by a tool-result guardrail (guardrails.py): a refusal that
        names it in the result's place, the record saying which guardrail withheld it."""
        result = self.result
        content = (
            f"Error: the result of {result.tool_name} was withheld by guardrail {guardrail}: "
            f"{reason}"
        )
        withheld = result.model_copy(update={"content": content, "is_error": True})
        record = self.record.model_copy(
            update={
                "guardrail": guardrail,
                "error": content[:RECORDED_ERROR_CHARS],
                "result_chars": len(content),
            }
        )
        return Outcome(withheld, record, self.fatal)

    @classmethod
    def _of(
        cls,
        call: ToolCall,
        content: str,
        outcome: ToolOutcome,
        *,
        fatal: str | None = None,
        **activity: Any,
    ) -> Outcome:
        result = ToolResult(
            tool_call_id=call.id,
            tool_name=call.name,
            content=content,
            is_error=outcome != "ok",
        )
        return cls(result, call_record(call, outcome, content, **activity), fatal)


def call_record(
    call: ToolCall,
    outcome: ToolOutcome,
    content: str,
    *,
    latency_ms: int = 0,
    attempts: int = 0,
    truncated: bool = False,
    externalised: bool = False,
) -> ToolCallRecord:
    return ToolCallRecord(
        id=call.id,
        name=call.name,
        arguments=call.arguments[:RECORDED_ARGUMENT_CHARS],
        outcome=outcome,
        error=None if outcome == "ok" else content[:RECORDED_ERROR_CHARS],
        result_chars=len(content),
        truncated=truncated,
        externalised=externalised,
        attempts=attempts,
        latency_ms=latency_ms,
    )
