"""The CLI's tables, laid out by rich as plain text, for a terminal, a log or a pipe alike: no
colour and no borders, columns two spaces apart, numbers right-aligned, and nothing ever cut: a
cell too long for its column is shortened here, with "...", before rich sees it. The trace's tool
calls wrap within the width, each call whole, beside the row or, when the other columns leave
them no room, under it. Pure functions: records in, a string out."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Container, Sequence

from rich.box import Box
from rich.console import Console
from rich.table import Table

from ..client.agent_client import StepStats
from ..workflows.state import (
    CompactionRecord,
    EarlierSteps,
    StepRecord,
    ToolApproval,
    ToolCallRecord,
    Usage,
)
from ..workflows.status import SubAgentApproval

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
    console = Console(file=io.StringIO(), width=100_000, color_system=None, markup=False)
    console.print(grid, emoji=False, highlight=False)
    return [line.rstrip() for line in console.file.getvalue().splitlines()]


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
    store). Cost is "-" when unknown. A long run's steps without a record of their own
    (`earlier`) come first, added up in a row."""
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
        rows.append((cells, [_tool_entry(call) for call in record.tool_calls] or ["-"]))
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
    room = width - max(len(line) for line in fixed) - 2
    if room >= MIN_TOOLS_COLUMN:  # the tools beside each row, wrapped in their column
        beside = [[*cells, "\n".join(_wrap(tools, room))] for cells, tools in rows]
        tools = "\n".join(_wrap(total_tools, room))
        lines = table([[*header, "tools"], *beside], totals=[*totals, "", tools], right=right)
    else:  # a long model name, large numbers: the tools go under the row, full width
        indent = fixed[0].index("model")
        under = [
            [" " * indent + line for line in _wrap(tools, width - indent)] for _, tools in rows
        ]
        lines = [fixed[0], " " * indent + "tools"]
        for line, tools in zip(fixed[1:], under, strict=False):
            lines += [line, *(text for text in tools if text.strip() != "-")]
        lines += [
            *fixed[-2:],
            *(" " * indent + line for line in _wrap(total_tools, width - indent)),
        ]
    notes = {
        "xN: N attempts": any(call.attempts > 1 for call in calls),
        "[cut]: result cut to its bound": any(c.truncated and not c.externalised for c in calls),
        "[ext]: whole result kept in the result store": any(c.externalised for c in calls),
    }
    lines += (
        ["; ".join(note for note, shown in notes.items() if shown)] if any(notes.values()) else []
    )
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
    """Tool calls that wait for a person: the id to decide each by, the step that asked, the
    tool and its arguments, and the sub-agent that asked when it is not the run."""
    rows = [
        [a.call_id, f"step {a.step}", f"{a.tool} {a.arguments}", _sub_agent(a)] for a in approvals
    ]
    return "\n".join(table(rows))


def _sub_agent(approval: ToolApproval) -> str:
    return f"(sub-agent {approval.workflow_id})" if isinstance(approval, SubAgentApproval) else ""


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
    """One row per label: the completed runs' steps (p50, p95, max), tokens and cost, the
    max_steps they suggest and how many of them it would have cut short."""
    header = ["label", "runs", "failed", "p50", "p95", "max", "mean tok", "p95 tok"]
    rows = [[*header, "mean cost", "max_steps", "cut short"]]
    for g in groups:
        counts = (g.steps_p50, g.steps_p95, g.steps_max)
        mean_tokens = None if g.tokens_mean is None else round(g.tokens_mean)
        rows.append(
            [
                shorten(g.label, LABEL_COLUMN),
                str(g.runs),
                str(g.failed),
                *("-" if value is None else str(value) for value in counts),
                "-" if mean_tokens is None else str(mean_tokens),
                "-" if g.tokens_p95 is None else str(g.tokens_p95),
                money(g.cost_mean_usd),
                "-" if g.recommended_max_steps is None else str(g.recommended_max_steps),
                str(g.cut_short) if g.runs else "-",
            ]
        )
    notes = [
        "p50/p95/max: steps of the completed runs (nearest rank); tok: input + output tokens",
        "max_steps: twice the p95; cut short: the completed runs that took more steps than that",
    ]
    return "\n".join(table(rows, right=range(1, len(rows[0]))) + notes)
