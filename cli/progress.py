"""A run's progress as lines for people: one line per finished step while a run is followed
(rebuilt from its progress stream, then completed from its result), one line per event for
`watch`, and the usage text both share. Step lines go to stderr; stdout keeps the answer."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from ..workflows.activity_io import ModelDelta
from ..workflows.events import AgentEvent
from ..workflows.state import StepRecord, ToolCallRecord, Usage
from .plumbing import say
from .tables import shorten


def usage_text(usage: Usage) -> str:
    cached = f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""
    cost = "" if usage.cost_usd is None else f", ${usage.cost_usd:.4f}"
    return f"{usage.input_tokens} in{cached} / {usage.output_tokens} out{cost}"


def step_line(record: StepRecord) -> str:
    """One finished step: the model call, then its tool calls or that it answered."""
    tools = ", ".join(f"{c.name} {c.latency_ms} ms ({c.outcome})" for c in record.tool_calls)
    model = f"step {record.step}: model {record.model_latency_ms} ms, {usage_text(record.usage)}"
    return model + (f"; tools: {tools}" if tools else "; answered")


def event_line(event: AgentEvent) -> str:
    """One progress event as a line for people."""
    head = f"step {event.step} {event.kind.replace('_', ' ')}"
    call = f" {event.tool} {event.call_id}" if event.tool else ""
    match event.kind:
        case "step_started":
            return f"{head}: {event.model}"
        case "step_finished":
            usage = usage_text(event.usage) if event.usage else ""
            calls = f"; calls {event.text}" if event.text else "; answered"
            return f"{head}: {event.model} {event.latency_ms} ms, {usage}{calls}"
        case "tool_call_started" | "approval_requested":
            return f"{head}:{call} {shorten(event.arguments or '', 200)}"
        case "tool_call_finished":
            error = f": {event.text}" if event.text else ""
            return f"{head}:{call} {event.outcome} in {event.latency_ms} ms{error}"
        case "approval_decided" | "compensation":
            reason = f" ({event.text})" if event.text else ""
            return f"{head}:{call} {event.outcome}{reason}"
        case "completed":
            return f"{head}: {shorten(event.text or '', 300)}"
        case _:
            detail = " ".join(part for part in (event.outcome, event.text) if part)
            return f"{head}: {shorten(detail, 300)}" if detail else head


class StepLines:
    """Prints each finished step once, on stderr: from the stream while the run goes, then from
    its result or failure, which have every step."""

    def __init__(self, before: Callable[[], None] | None = None) -> None:
        self.printed = 0
        self._before = before
        """Called before a line is printed (to end a streamed text's line)."""

    def show(self, records: Sequence[StepRecord]) -> None:
        for record in records[self.printed :]:
            if self._before is not None:
                self._before()
            say(step_line(record))
        self.printed = max(self.printed, len(records))


class StepsFromEvents:
    """Each step's record, rebuilt from the progress stream for the step lines: a step is
    finished once its tools have results, when the next step starts or the run ends."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self.finished = 0

    def add(self, event: AgentEvent) -> list[StepRecord]:
        match event.kind:
            case "step_finished":
                self.records.append(
                    StepRecord(
                        step=event.step,
                        model=event.model or "",
                        model_latency_ms=event.latency_ms or 0,
                        model_attempts=event.attempts or 1,
                        usage=event.usage or Usage(),
                        finish_reason=event.outcome,
                    )
                )
            case "tool_call_finished" if self.records:
                self.records[-1].tool_calls.append(
                    ToolCallRecord.model_validate(
                        {
                            "id": event.call_id,
                            "name": event.tool,
                            "arguments": event.arguments or "",
                            "outcome": event.outcome,
                            "error": event.text,
                            "latency_ms": event.latency_ms or 0,
                            "attempts": event.attempts or 0,
                        }
                    )
                )
            case "step_started" | "completed" | "failed":
                self.finished = len(self.records)
        return self.records[: self.finished]


class DeltaLines:
    """A streaming model call's text on stderr as it is written: text as is, reasoning
    summaries in brackets, a note when an attempt failed and what it wrote is void."""

    def __init__(self) -> None:
        self._at: tuple[int, int, str] | None = None
        """(step, attempt, kind) of what was written last; None at the start of a line."""

    def text(self, delta: ModelDelta) -> str:
        """What to write for `delta` (pure, for tests)."""
        where = (delta.step, delta.attempt, delta.kind)
        if delta.kind == "void":
            out = self._line_end()
            return out + f"[step {delta.step}, attempt {delta.attempt} failed: its text is void]\n"
        out = ""
        if self._at != where:
            out = self._line_end() + ("[thinking: " if delta.kind == "reasoning" else "")
            self._at = where
        return out + delta.text

    def _line_end(self) -> str:
        at, self._at = self._at, None
        if at is None:
            return ""
        return "]\n" if at[2] == "reasoning" else "\n"

    def show(self, delta: ModelDelta) -> None:
        sys.stderr.write(self.text(delta))
        sys.stderr.flush()

    def end(self) -> None:
        """End the line being written, if any."""
        if end := self._line_end():
            sys.stderr.write(end)
            sys.stderr.flush()
