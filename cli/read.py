"""The subcommands that only read runs on a server, and never change one: `watch`, `status`,
`calls`, `list --awaiting-approval`, `trace` and `stats`. Each prints on stdout (JSON with
--json) and returns its exit status; a server that refuses raises, and the caller reports it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from ..client import overview
from ..client.agent_client import AgentClient, AgentRun
from ..serving.command_line import say, visible
from ..workflows.events import AgentEvent
from .args import COUNT, POSITIVE, Following, subcommand
from .tables import event_line, stats_table, trace_table, waiting_calls_table

DEFAULT_STATS_LIMIT = 500


@subcommand()
@click.option(
    "--from", "from_offset", type=COUNT, default=0, help="start at this event (each line's first)"
)
async def watch(agent_run: AgentRun, following: Following, from_offset: int) -> int:
    """Follow the run's progress stream, one line per event, to the run's end (a run started
    elsewhere, or one that has ended: then what it published); 0 when it completed."""
    last: AgentEvent | None = None
    async for item in agent_run.events(from_offset):
        last = item.data
        data = {"offset": item.offset, **last.model_dump(mode="json")}
        following.answer(data, f"{item.offset:>5}  {visible(event_line(last))}")
    return 0 if last is not None and last.kind == "completed" else 1


@subcommand()
async def status(agent_run: AgentRun, following: Following) -> int:
    """Print the run's status query as JSON."""
    answer = await agent_run.status()
    print(json.dumps({"workflow_id": agent_run.id, **answer.model_dump(mode="json")}))
    return 0


@subcommand()
async def calls(agent_run: AgentRun, following: Following) -> int:
    """List the run's tool calls that wait for a person: its own, then its sub-agents', by the
    qualified ids that decide them through the run."""
    waiting = await agent_run.pending_tool_calls()
    data = [c.model_dump(mode="json") for c in waiting]
    none = f"no tool call of {agent_run.id} waits for a decision"
    following.answer(data, waiting_calls_table(waiting), none)
    return 0


@subcommand(of_run=False)
@click.option("--awaiting-approval", is_flag=True, required=True, help="runs waiting on a person")
async def list_(client: AgentClient, following: Following, awaiting_approval: bool) -> int:
    """List the runs whose plan or tool calls wait for a person.
    \f
    One line (or JSON object) per run that waits for a person, with its plan or its tool calls
    from its status query."""
    waiting = await overview.waiting_runs(client)
    lines = []
    for run in waiting:
        plan = run.plan
        said = [f"unknown: {run.error}"] if run.error is not None else []
        said += [f"plan v{plan.version}: " + " | ".join(plan.steps)] if plan is not None else []
        said += [f"tool call {c.call_id}: {c.tool} {c.arguments}" for c in run.calls]
        lines += [f"{run.workflow_id}  {visible(line)}" for line in said]
    data = [run.as_json() for run in waiting]
    following.answer(data, "\n".join(lines), "no run is waiting for approval")
    return 0


@subcommand()
async def trace(agent_run: AgentRun, following: Following) -> int:
    """Print the run's steps as a table, one row per step, with totals (a running run needs its
    worker; an ended run does not)."""
    whole = await agent_run.full_trace()
    out: dict[str, Any] = {"workflow_id": agent_run.id}
    out["trace"] = [r.model_dump(mode="json") for r in whole.step_records]
    if whole.earlier_steps is not None:
        out["earlier_steps"] = whole.earlier_steps.model_dump()
    if whole.tool_notices:
        out["tool_notices"] = whole.tool_notices
    table = trace_table(whole.step_records, earlier=whole.earlier_steps)
    following.answer(out, "\n".join([*(f"note: {n}" for n in whole.tool_notices), table]))
    return 0


@subcommand(of_run=False)
@click.option("--label", help="only the runs started with this --label")
@click.option("--limit", type=POSITIVE, default=DEFAULT_STATS_LIMIT, help="read the N newest runs")
async def stats(client: AgentClient, following: Following, label: str | None, limit: int) -> int:
    """Per label, the runs that ended (completed, failed, other), the steps, tokens and cost of
    those that completed, and the max_steps their distribution suggests (twice the p95 of the
    steps)."""
    read = await overview.label_stats(client, limit, label)
    for closed in read.unreadable:
        say(f"{closed.workflow_id}: its outcome could not be read: {closed.error}")
    asked = {"label": label, "limit": limit, "unreadable": len(read.unreadable)}
    groups = [dataclasses.asdict(g) for g in read.groups]
    table = stats_table(read.groups) if read.groups else ""
    none = f"no agent run{f' with label {label!r}' if label is not None else ''} has ended yet"
    following.answer({**asked, "groups": groups}, table, none)
    return 0


@subcommand()
async def callbacks(agent_run: AgentRun, following: Following) -> int:
    """List the run's callback-tool calls that wait for a client's answer (`answer-callback` sends
    one)."""
    waiting = await agent_run.pending_callbacks()
    lines = [
        f"{c.call_id}  {c.tool} {json.dumps(c.arguments, ensure_ascii=False)}  "
        f"(waits {c.timeout_seconds:g} s)"
        for c in waiting
    ]
    data = [c.model_dump(mode="json") for c in waiting]
    following.answer(data, "\n".join(lines), f"no callback of {agent_run.id} waits for an answer")
    return 0
