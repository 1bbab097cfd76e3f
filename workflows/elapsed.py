"""How long since a moment of the run, in whole milliseconds of workflow time: the latencies the
trace records (a model call, a tool call, a script, a callback, a sub-agent, a judge, a
guardrail). Deterministic: `workflow.now()` is the only clock."""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow


def ms_since(started: datetime) -> int:
    return int((workflow.now() - started).total_seconds() * 1000)
