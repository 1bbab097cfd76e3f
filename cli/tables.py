"""The trace and stats tables, drawn as plain text for a terminal or a log: fixed columns, numbers
right-aligned, and the tool calls of a step wrapped within the width (or under the row when the
fixed columns leave them no room), so that no number and no tool call is ever cut off or dropped.
And the line of a tool call that waits for a person. Pure functions: records in, a string out;
the caller decides where it goes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..client.agent_client import StepStats
from ..workflows.state import (
    CompactionRecord,
    EarlierSteps,
    StepRecord,
    ToolApproval,
    ToolCallRecord,
)
from ..workflows.status import SubAgentApproval

TABLE_WIDTH = 100
"""`trace` and `stats` tables fit a terminal this wide (long tool lists wrap)."""
MODEL_COLUMN = 20
LABEL_COLUMN = 16
FINISH_COLUMN = 12
MIN_TOOLS_COLUMN = 28
"""Narrower than this, the tool calls go on lines of their own under each row."""


def trace_table(
    records: Sequence[StepRecord],
    *,
    compactions: Sequence[CompactionRecord] = (),
    earlier: EarlierSteps | None = None,
    width: int = TABLE_WIDTH,
) -> str:
    """The steps of a run, one row each, then a totals row: the model call (model, latency,
    attempts, tokens, cost, why it stopped) and its tool calls (`name outcome latency`, `xN`
    for N attempts, [cut] for a result cut to its bound, [ext] for one kept whole in the result
    store). The tools column wraps to keep the table within `width`. Cost is "-" when unknown.
    A long run's steps without a record of their own (`earlier`) come first, added up in a row."""
    header = ["step", "model", "ms", "att", "input", "cached", "output", "cost", "finish"]
    right = {0, 2, 3, 4, 5, 6, 7}
    rows: list[tuple[list[str], list[str]]] = []
    if earlier is not None and earlier.up_to_step:
        usage = earlier.usage
        cells = [
            f"1-{earlier.up_to_step}",
            "(added up)",
            str(earlier.model_latency_ms),
            str(earlier.model_attempts),
            str(usage.input_tokens),
            str(usage.cached_input_tokens),
            str(usage.output_tokens),
            money(usage.cost_usd),
            "",
        ]
        rows.append((cells, [f"{o} {n}" for o, n in earlier.tool_calls.items()] or ["-"]))
    for record in records:
        usage = record.usage
        cells = [
            str(record.step),
            shorten(record.model, MODEL_COLUMN),
            str(record.model_latency_ms),
            str(record.model_attempts),
            str(usage.input_tokens),
            str(usage.cached_input_tokens),
            str(usage.output_tokens),
            money(usage.cost_usd),
            shorten(record.finish_reason or "-", FINISH_COLUMN),
        ]
        rows.append((cells, [_tool_entry(call) for call in record.tool_calls] or ["-"]))
    before = earlier or EarlierSteps()
    total = sum((r.usage for r in records), before.usage)
    calls = [call for record in records for call in record.tool_calls]
    outcomes = Counter(before.tool_calls) + Counter(call.outcome for call in calls)
    steps = before.up_to_step + len(records)
    totals = [
        "total",
        f"{steps} step" + ("" if steps == 1 else "s"),
        str(before.model_latency_ms + sum(r.model_latency_ms for r in records)),
        str(before.model_attempts + sum(r.model_attempts for r in records)),
        str(total.input_tokens),
        str(total.cached_input_tokens),
        str(total.output_tokens),
        money(total.cost_usd) if steps else "-",
        "",
    ]
    by_outcome = [f"{outcome} {count}" for outcome, count in outcomes.items()]
    call_count = sum(outcomes.values())
    tools_total = (
        [f"{call_count} call{'' if call_count == 1 else 's'}: {by_outcome[0]}", *by_outcome[1:]]
        if call_count
        else ["no tool calls"]
    )
    widths = [
        max(len(cells[i]) for cells in [header, totals, *(c for c, _ in rows)])
        for i in range(len(header))
    ]
    indent = sum(widths) + 2 * len(widths)
    beside = width - indent >= MIN_TOOLS_COLUMN
    if not beside:  # a long model name, large numbers: the tools go under the row, full width
        indent = widths[0] + 2

    def line(cells: list[str], tools: list[str]) -> list[str]:
        fixed = "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        )
        wrapped = _wrap(tools, width - indent)
        if not beside:
            return [fixed.rstrip(), *(" " * indent + more for more in wrapped if more != "-")]
        return [
            (fixed + "  " + wrapped[0]).rstrip(),
            *((" " * indent + more).rstrip() for more in wrapped[1:]),
        ]

    lines = line(header, ["tools"])
    if not beside:
        lines = [lines[0], " " * indent + "tools"]
    for cells, tools in rows:
        lines += line(cells, tools)
    body = line(totals, tools_total)
    lines.append("-" * min(width, max(len(text) for text in lines + body)))
    lines += body
    notes = []
    if any(call.attempts > 1 for call in calls):
        notes.append("xN: N attempts")
    if any(call.truncated and not call.externalised for call in calls):
        notes.append("[cut]: result cut to its bound")
    if any(call.externalised for call in calls):
        notes.append("[ext]: whole result kept in the result store")
    if notes:
        lines.append("; ".join(notes))
    for compaction in compactions:
        lost = (
            ""
            if compaction.cached_tokens_lost is None
            else f", {compaction.cached_tokens_lost} cached tokens lost"
        )
        lines.append(
            f"compaction before step {compaction.step} ({compaction.policy}): "
            f"{compaction.messages_removed} messages, ~{compaction.tokens_removed} tokens "
            f"removed{lost}"
        )
    return "\n".join(lines)


def waiting_call_line(approval: ToolApproval) -> str:
    """A tool call that waits for a person: its id (the one to decide it by), the step that
    asked, the tool and its arguments, and the sub-agent that asked when it is not the run."""
    line = f"{approval.call_id}  step {approval.step}  {approval.tool} {approval.arguments}"
    if isinstance(approval, SubAgentApproval):
        line += f"  (sub-agent {approval.workflow_id})"
    return line


def _tool_entry(call: ToolCallRecord) -> str:
    entry = f"{call.name} {call.outcome}"
    if call.attempts:  # 0: no activity ran (refused, loop-detected, built-in)
        entry += f" {call.latency_ms}ms"
    if call.attempts > 1:
        entry += f" x{call.attempts}"
    if call.externalised:
        entry += " [ext]"
    elif call.truncated:
        entry += " [cut]"
    return entry


def _wrap(entries: list[str], width: int) -> list[str]:
    """Comma-separated entries, as many a line as fit; an entry too long alone is shortened."""
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
    """One row per label: the completed runs' steps (p50, p95, max), tokens and cost, the
    max_steps they suggest and how many of them it would have cut short."""
    header = [
        "label",
        "runs",
        "failed",
        "p50",
        "p95",
        "max",
        "mean tok",
        "p95 tok",
        "mean cost",
        "max_steps",
        "cut short",
    ]
    rows = [header]
    for g in groups:
        rows.append(
            [
                shorten(g.label, LABEL_COLUMN),
                str(g.runs),
                str(g.failed),
                *(
                    "-" if value is None else str(value)
                    for value in (g.steps_p50, g.steps_p95, g.steps_max)
                ),
                "-" if g.tokens_mean is None else str(round(g.tokens_mean)),
                "-" if g.tokens_p95 is None else str(g.tokens_p95),
                money(g.cost_mean_usd),
                "-" if g.recommended_max_steps is None else str(g.recommended_max_steps),
                str(g.cut_short) if g.runs else "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    lines += [
        "p50/p95/max: steps of the completed runs (nearest rank); tok: input + output tokens",
        "max_steps: twice the p95; cut short: the completed runs that took more steps than that",
    ]
    return "\n".join(lines)
