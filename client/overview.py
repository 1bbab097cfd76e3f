"""What a person reads across runs, rather than of one: the runs that wait for a person, each
with what it waits on, and each label's runs that ended, the completed ones as step statistics.
The CLI's `list --awaiting-approval` and `stats` print these; code calls them as they do.

    for waiting in await waiting_runs(agents):
        print(waiting.workflow_id, waiting.plan, [c.call_id for c in waiting.calls])
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from ..workflows.decisions import PlanState, ToolApproval
from ..workflows.inputs import AgentResult
from .agent_client import AgentClient, AgentRun, ClosedRun, StepStats, step_stats

STATUS_TIMEOUT_SECONDS = 5.0
"""Each waiting run is asked for its status; a run whose worker is gone does not answer."""
STATUS_CONCURRENCY = 8
"""Waiting runs asked for their status at once: one at a time, a few runs whose worker is gone
held a listing for STATUS_TIMEOUT_SECONDS each."""
NO_ANSWER = "no worker answered the status query"
NO_LABEL = "(no label)"


@dataclass(frozen=True)
class WaitingRun:
    """A run that waits for a person: the plan that waits, and the tool calls (its own, then
    its sub-agents', by the qualified ids that decide them through it); `error` when its status
    could not be read."""

    workflow_id: str
    plan: PlanState | None = None
    calls: list[ToolApproval] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "plan": None if self.plan is None else self.plan.model_dump(mode="json"),
            "calls": [call.model_dump(mode="json") for call in self.calls],
            "error": self.error,
        }


async def waiting_runs(client: AgentClient, limit: int | None = None) -> list[WaitingRun]:
    """The runs that wait for a person now (found through visibility, the newest `limit` of
    them, then asked for their status, STATUS_CONCURRENCY at once: one decided since it was
    indexed is left out). A sub-agent that waits is listed by its parent, with the ids that
    decide through it, and not again on its own."""
    asking = asyncio.Semaphore(STATUS_CONCURRENCY)

    async def waiting(agent_run: AgentRun) -> WaitingRun | None:
        async with asking:
            try:
                status = await asyncio.wait_for(agent_run.status(), STATUS_TIMEOUT_SECONDS)
            except (RPCError, WorkflowQueryFailedError, TimeoutError) as error:
                reason = str(getattr(error, "message", "") or error).strip().splitlines()
                return WaitingRun(agent_run.id, error=next(iter(reason), "") or NO_ANSWER)
        plan = status.plan if status.plan and status.plan.status == "awaiting_approval" else None
        calls = [*status.approvals, *status.sub_agent_approvals]
        if status.status == "awaiting_approval" and (plan is not None or calls):
            return WaitingRun(agent_run.id, plan, calls)
        return None

    runs = [agent_run async for agent_run in client.awaiting_approval(limit)]
    found = [run for run in await asyncio.gather(*map(waiting, runs)) if run is not None]
    asked_by_parents = {getattr(c, "workflow_id", None) for run in found for c in run.calls}
    return [run for run in found if not (run.calls and run.workflow_id in asked_by_parents)]


@dataclass(frozen=True)
class LabelStats:
    """Each label's step statistics, labels in order (runs without one last), and the runs
    whose outcome could not be read (each label's `other` counts them)."""

    groups: list[StepStats]
    unreadable: list[ClosedRun]


async def label_stats(client: AgentClient, limit: int, label: str | None = None) -> LabelStats:
    """The statistics of the newest `limit` runs that ended (of `label` only, when given):
    each of them counted once, as completed, failed or other."""
    completed: defaultdict[str, list[AgentResult]] = defaultdict(list)
    failed: Counter[str] = Counter()
    other: Counter[str] = Counter()
    unreadable: list[ClosedRun] = []
    async for closed in client.closed_runs(limit, label=label):
        group = closed.label if closed.label is not None else NO_LABEL
        if closed.result is not None:
            completed[group].append(closed.result)
        elif closed.failure is not None:
            failed[group] += 1
        else:
            other[group] += 1
            if closed.error is not None:
                unreadable.append(closed)
    labels = sorted({*completed, *failed, *other}, key=lambda g: (g == NO_LABEL, g))
    groups = [step_stats(g, completed[g], failed[g], other[g]) for g in labels]
    return LabelStats(groups, unreadable)
