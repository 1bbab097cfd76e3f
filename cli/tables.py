"""What the CLI prints of runs: their progress as lines, and tables.

Progress: one line per finished step while a run is followed (rebuilt from its progress stream,
then completed from its result), one line per event for `watch`, and a streaming model call's
text; on stderr, so that stdout keeps the answer. Tables: laid out by rich as plain text, for a
terminal, a log or a pipe alike: no colour and no borders, columns two spaces apart, numbers
right-aligned, and nothing ever cut: a cell too long for its column is shortened here, with
"...", before rich sees it. The trace's tool calls wrap within the width, each call whole,
beside the row or, when the other columns leave them no room, under it."""

from __future__ import annotations

import io
import json
import sys
from collections import Counter
from collections.abc import Callable, Container, Sequence

from rich.box import Box
from rich.console import Console
from rich.table import Table

from ..client.agent_client import StepStats
from ..serving.command_line import say, visible
from ..workflows.activity_io import ModelDelta
from ..workflows.decisions import ToolApproval
from ..workflows.events import AgentEvent
from ..workflows.reporting import guardrail_lines, verdict_line
from ..workflows.script_tools import RUN_CODE as SCRIPT_TOOL
from ..workflows.state import CompactionRecord, EarlierSteps, StepRecord, ToolCallRecord
from ..workflows.status import SubAgentApproval
from ..workflows.usage import Usage

TABLE_WIDTH = 100
"""`trace` tables fit a terminal this wide (long tool lists wrap)."""
MODEL_COLUMN = 20
LABEL_COLUMN = 16
FINISH_COLUMN = 12
MIN_TOOLS_COLUMN = 28
"""Narrower than this, the tool calls go on lines of their own under each row."""
_RULE_ABOVE_TOTALS = Box("    \n    \n    \n    \n    \n----\n    \n    \n")
"""Spaces between the columns, and a line of dashes above the footer only."""


def table(
    rows: Sequence[Sequence[str]],
    *,
    totals: Sequence[str] | None = None,
    right: Container[int] = (),
) -> list[str]:
    """`rows` (a header first, if any) as lines, the columns in `right` right-aligned, and a
    rule and `totals` under them. No cell is wrapped or cut: the caller shortens and wraps."""
    grid = Table(
        box=_RULE_ABOVE_TOTALS,
        show_header=False,
        show_footer=totals is not None,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    for i in range(len(rows[0])):
        footer = totals[i] if totals is not None else ""
        grid.add_column(footer=footer, justify="right" if i in right else "left", no_wrap=True)
    for row in rows:
        grid.add_row(*row)
    text = io.StringIO()
    Console(file=text, width=100_000, color_system=None, markup=False).print(grid, emoji=False)
    return [line.rstrip() for line in text.getvalue().splitlines()]


def trace_table(
    records: Sequence[StepRecord],
    *,
    compactions: Sequence[CompactionRecord] = (),
    earlier: EarlierSteps | None = None,
) -> str:
    """The steps of a run, one row each, then a totals row: the model call (model, latency,
    attempts, tokens, cost, why it stopped) and its tool calls (`name outcome latency`, `xN`
    for N attempts, [cut] for a result cut to its bound, [ext] for one kept whole in the result
    store, [held] for one a guardrail withheld), and after a call auto mode's judge judged
    `(judge approved)` (denied, escalated, late). Cost is "-" when unknown. A long run's steps
    without a record of their own (`earlier`) come first, added up in a row; each script's
    calls and each guardrail's verdicts come after the table."""
    header = ["step", "model", "ms", "att", "input", "cached", "output", "cost", "finish"]
    rows: list[tuple[list[str], list[str]]] = []
    before = earlier or EarlierSteps()
    if before.up_to_step:
        numbers = _numbers(before.model_latency_ms, before.model_attempts, before.usage)
        cells = [f"1-{before.up_to_step}", "(added up)", *numbers, ""]
        rows.append((cells, [f"{o} {n}" for o, n in before.tool_calls.items()] or ["-"]))
    for record in records:
        finish = shorten(record.finish_reason or "-", FINISH_COLUMN)
        numbers = _numbers(record.model_latency_ms, record.model_attempts, record.usage)
        cells = [str(record.step), shorten(record.model, MODEL_COLUMN), *numbers, finish]
        made = Counter(call.script for call in record.tool_calls)  # a script's, under the table
        calls_ = [(call, made[call.id]) for call in record.tool_calls if not call.script]
        entries = [entry for call, n in calls_ for entry in _tool_entries(call, n)]
        rows.append((cells, entries or ["-"]))
    calls = [call for record in records for call in record.tool_calls]
    outcomes = Counter(before.tool_calls) + Counter(call.outcome for call in calls)
    steps = before.up_to_step + len(records)
    numbers = _numbers(
        before.model_latency_ms + sum(r.model_latency_ms for r in records),
        before.model_attempts + sum(r.model_attempts for r in records),
        sum((r.usage for r in records), before.usage),
    )
    totals = ["total", f"{steps} step" + ("" if steps == 1 else "s"), *numbers]
    totals[7] = totals[7] if steps else "-"
    count = sum(outcomes.values())
    total_tools = [f"{outcome} {n}" for outcome, n in outcomes.items()] or ["no tool calls"]
    if count:
        total_tools[0] = f"{count} call{'' if count == 1 else 's'}: {total_tools[0]}"
    right = {0, 2, 3, 4, 5, 6, 7}
    fixed = table([header, *(cells for cells, _ in rows)], totals=[*totals, ""], right=right)
    room = TABLE_WIDTH - max(len(line) for line in fixed) - 2
    if room >= MIN_TOOLS_COLUMN:  # the tools beside each row, wrapped in their column
        beside = [[*cells, "\n".join(_wrap(tools, room))] for cells, tools in rows]
        tools = "\n".join(_wrap(total_tools, room))
        lines = table([[*header, "tools"], *beside], totals=[*totals, "", tools], right=right)
    else:  # a long model name, large numbers: the tools go under the row, full width
        indent = fixed[0].index("model")

        def under(entries: list[str]) -> list[str]:
            wrapped = _wrap(entries, TABLE_WIDTH - indent)
            return [" " * indent + line for line in wrapped if line != "-"]

        lines = [fixed[0], " " * indent + "tools"]
        for line, (_, entries) in zip(fixed[1:], rows, strict=False):  # the rule and totals after
            lines += [line, *under(entries)]
        lines += [*fixed[-2:], *under(total_tools)]
    notes = {
        "xN: N attempts": any(call.attempts > 1 for call in calls),
        "[cut]: result cut to its bound": any(c.truncated and not c.externalised for c in calls),
        "[ext]: whole result kept in the result store": any(c.externalised for c in calls),
        "[held]: result withheld by a guardrail": any(c.guardrail for c in calls),
    }
    shown = [note for note, used in notes.items() if used]
    lines += ["; ".join(shown)] if shown else []
    lines += _scripts(records) + guardrail_lines(records)
    for compaction in compactions:
        lost = compaction.cached_tokens_lost
        lines.append(
            f"compaction before step {compaction.step} ({compaction.policy}): "
            f"{compaction.messages_removed} messages, ~{compaction.tokens_removed} tokens "
            f"removed" + ("" if lost is None else f", {lost} cached tokens lost")
        )
    return "\n".join(lines)


def _numbers(latency: int, attempts: int, usage: Usage) -> list[str]:
    tokens = (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens)
    return [str(latency), str(attempts), *map(str, tokens), money(usage.cost_usd)]


def waiting_calls_table(approvals: Sequence[ToolApproval]) -> str:
    """Tool calls that wait for a person ("" for none): the id to decide each by, the step that
    asked, the tool and its arguments, the sub-agent that asked when it is not the run, and the
    script that made it."""
    rows = [
        [visible(a.call_id), f"step {a.step}", f"{a.tool} {a.arguments}", _asker(a), _judge(a)]
        for a in approvals
    ]
    return "\n".join(table(rows)) if rows else ""


def _judge(approval: ToolApproval) -> str:
    """What auto mode's judge did with a waiting call: reviews it, or why it went to a person."""
    if approval.judging:
        return "(the judge reviews it)"
    verdict = approval.verdict
    return "" if verdict is None else f"({shorten(verdict_line(verdict), 160)})"


def _asker(approval: ToolApproval) -> str:
    """The sub-agent that asked, when not the run itself; the script that made the call."""
    if isinstance(approval, SubAgentApproval):
        return f"(sub-agent {approval.workflow_id})"
    return f"(in the script of {approval.script})" if approval.script else ""


def _tool_entries(call: ToolCallRecord, script_calls: int = 0) -> list[str]:
    """A call's entry, and what auto mode's judge made of it when it judged the call. No latency
    when no activity ran (0 attempts: refused, loop-detected, built-in); a script's calls
    counted."""
    latency = f"{call.latency_ms}ms" if call.attempts else ""
    attempts = f"x{call.attempts}" if call.attempts > 1 else ""
    kept = "[ext]" if call.externalised else "[cut]" if call.truncated else ""
    kept += "[held]" if call.guardrail else ""
    made = f"({script_calls} calls)" if script_calls else ""
    name = visible(call.name)  # a name the model made up is recorded as it wrote it
    entry = " ".join(filter(None, [name, call.outcome, latency, attempts, kept, made]))
    return [entry] if call.verdict is None else [entry, f"(judge {call.verdict.outcome})"]


def _scripts(records: Sequence[StepRecord]) -> list[str]:
    """Each code-mode script (docs/code-mode.md) as its record keeps it, its calls under it."""
    lines: list[str] = []
    for record, call in ((r, c) for r in records for c in r.tool_calls if c.name == SCRIPT_TOOL):
        try:
            code = str(json.loads(call.arguments).get("code", ""))
        except (ValueError, AttributeError):
            code = call.arguments  # cut at its bound: shown as kept
        lines += [f"script {call.id} (step {record.step}, {call.outcome}):"]
        lines += [f"    {line}".rstrip() for line in code.strip("\n").splitlines()]
        lines += [
            f"  {c.id} {' '.join(_tool_entries(c))} {shorten(c.arguments, 120)}"
            for c in record.tool_calls
            if c.script == call.id
        ]
    return lines


def _wrap(entries: list[str], width: int) -> list[str]:
    """Comma-separated entries, as many a line as fit, each whole; one too long alone is
    shortened."""
    lines: list[str] = []
    current = ""
    for index, entry in enumerate(entries):
        item = shorten(entry + ("," if index < len(entries) - 1 else ""), width)
        if current and len(current) + 1 + len(item) > width:
            lines.append(current)
            current = item
        else:
            current = f"{current} {item}" if current else item
    return [*lines, current]


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def money(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:.6f}"


def stats_table(groups: Sequence[StepStats]) -> str:
    """One row per label: its runs that ended, as many as completed, failed and ended
    otherwise (which add up to them all); the completed runs' steps (p50, p95, max), mean
    tokens and cost, the max_steps they suggest and how many of them it would have cut short.
    (The p95 of the tokens is in the JSON: the row has no room for it.)"""
    header = ["label", "completed", "failed", "other", "p50", "p95", "max", "mean tok"]
    rows = [[*header, "mean cost", "max_steps", "cut short"]]
    for g in groups:
        tokens = None if g.tokens_mean is None else round(g.tokens_mean)
        numbers = [g.completed, g.failed, g.other, g.steps_p50, g.steps_p95, g.steps_max, tokens]
        cut_short = str(g.cut_short) if g.completed else "-"
        rows.append([shorten(g.label, LABEL_COLUMN), *map(_dash, numbers), money(g.cost_mean_usd)])
        rows[-1] += [_dash(g.recommended_max_steps), cut_short]
    notes = [
        "other: the runs cancelled, terminated or timed out, or whose outcome could not be read",
        "p50/p95/max: steps of the completed runs (nearest rank); tok: input + output tokens",
        "max_steps: twice the p95; cut short: the completed runs that took more steps than that",
    ]
    return "\n".join(table(rows, right=range(1, len(rows[0]))) + notes)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def usage_text(usage: Usage) -> str:
    cached = f" ({usage.cached_input_tokens} cached)" if usage.cached_input_tokens else ""
    cost = "" if usage.cost_usd is None else f", ${usage.cost_usd:.4f}"
    return f"{usage.input_tokens} in{cached} / {usage.output_tokens} out{cost}"


def step_line(record: StepRecord) -> str:
    """One finished step: the model call, then its tool calls or that it answered."""
    tools = ", ".join(f"{c.name} {c.latency_ms} ms ({c.outcome})" for c in record.tool_calls)
    model = f"step {record.step}: model {record.model_latency_ms} ms, {usage_text(record.usage)}"
    return visible(model + (f"; tools: {tools}" if tools else "; answered"))


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
    """Prints each finished step once, on stderr: while the run goes, from its progress stream
    (`add`: a step is finished once its tools have results, when the next step starts or the
    run ends), then from its result or failure, which have every step (`show`). `before` is
    called before a line is printed (to end a streamed text's line)."""

    def __init__(self, before: Callable[[], None] | None = None) -> None:
        self.printed, self.finished, self._before = 0, 0, before
        self.records: list[StepRecord] = []

    def add(self, event: AgentEvent) -> None:
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
                call: dict[str, object] = {"id": event.call_id, "name": event.tool}
                call["outcome"] = event.outcome
                call |= {"arguments": event.arguments or "", "error": event.text}
                call |= {"latency_ms": event.latency_ms or 0, "attempts": event.attempts or 0}
                self.records[-1].tool_calls.append(ToolCallRecord.model_validate(call))
            case "step_started" | "completed" | "failed":
                self.finished = len(self.records)
        self.show(self.records[: self.finished])

    def show(self, records: Sequence[StepRecord]) -> None:
        for record in records[self.printed :]:
            if self._before is not None:
                self._before()
            say(step_line(record))
        self.printed = max(self.printed, len(records))


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
        print(visible(self.text(delta), lines=True), end="", file=sys.stderr, flush=True)

    def end(self) -> None:
        """End the line being written, if any."""
        print(self._line_end(), end="", file=sys.stderr, flush=True)
