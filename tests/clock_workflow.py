"""A workflow that reads the clock the way a source scan misses, for tests/test_determinism.py.

`import datetime as dt` then `dt.datetime.now()`: the SDK's own sandbox refuses it when it
imports this module for the run; a runner that passes the module through does not."""

from __future__ import annotations

import datetime as dt

from temporalio import workflow


@workflow.defn(sandboxed=True)
class ClockWorkflow:
    @workflow.run
    async def run(self) -> str:
        return dt.datetime.now().isoformat()
