"""A worker process that SIGKILLs itself at a named point: the crash half of the crash tests.

    python -m tests.crash_worker --address HOST:PORT --task-queue Q --ready-file F
                                 [--crash-at POINT --crash-file C] [--max-cached-workflows N]
                                 [--mcp-config FILE]

Run from the repository root, with $AGENT_DEMO_DB set. Without --crash-at it is a normal worker
(the "fresh worker" that takes over, and the one that records the reference runs). It writes F
once it is polling. At POINT it writes POINT to C, then kills its own process with SIGKILL: no
cleanup, no goodbye to the server, like a machine losing power.

POINT is one of:

- `before:ACTIVITY[:N]`: at the start of this process's Nth attempt of ACTIVITY (default 1st),
  before the activity's code runs. `before:call_model:3` is "during a model call".
- `after:ACTIVITY[:N]`: the activity's code returned (a tool's database transaction committed),
  but its result has not been reported to the server. `after:cancel_order` is "in a
  side-effecting tool after its write committed"; `after:reverse_refund` does the same in a
  compensation.
- `schedule:ACTIVITY[:N]`: inside a workflow task, as the workflow schedules its Nth ACTIVITY,
  before the task's commands reach the server. `schedule:call_model:3` is "between steps": the
  results of step 2's tools are in the history, and the next model call is not; the server
  only learns of the crash when the workflow task times out, and the next worker replays the
  history to pick the loop up where it was. (A crash during a model call, in contrast, loses
  an activity attempt, which the activity's start-to-close timeout recovers.)

By default the worker keeps no workflow in its cache and takes one workflow task at a time (see
`serve`); `--max-cached-workflows N` gives it a cache and so a sticky queue, as a production
worker has (bench/faults.py draws both kinds).

Every worker here re-registers the demo tools with short timeouts and quick retries (the same
functions, so the same database code and idempotency keys): a call lost with a killed worker is
retried after `TIMEOUT_SECONDS`, not after the demo's 30 s. All workers of one test run this
same registration, so the workflow sees the same tool specs on every worker. It also registers
`wait_for_file`, a read-only tool that waits until the test lets it go, and `note_call`, which
writes a line each time it runs; and tests/guardrails_for_tests.py's guardrails (each check,
`guardrail:NAME`, a crash point too). `--mcp-config` serves
the MCP servers of a config file too, as `worker.py --mcp-config` does (their calls' activity
types, `server__tool`, are crash points like any other).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
from temporalio import activity, workflow
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
    StartActivityInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from durable_agent.activities.tools import tool
from durable_agent.demo import tools as demo_tools
from durable_agent.serving.command_line import Command, parse, refuse
from durable_agent.workflows.specs import RetrySettings

TIMEOUT_SECONDS = 3.0
"""Start-to-close timeout of every demo tool and compensation attempt in the crash tests."""
QUICK_RETRY = RetrySettings(
    maximum_attempts=10,
    initial_interval_seconds=0.1,
    backoff_coefficient=1.5,
    maximum_interval_seconds=1.0,
)

_COMPENSATIONS = {
    "cancel_order": demo_tools.reinstate_order,
    "issue_refund": demo_tools.reverse_refund,
    "send_email": demo_tools.send_correction,
}


def register_tools() -> None:
    """The demo tools again, with short timeouts; and `wait_for_file`. Only in this process."""
    for name in demo_tools.DEMO_TOOL_NAMES:
        function = getattr(demo_tools, name)
        compensation = _COMPENSATIONS.get(name)
        tool(
            side_effects=compensation is not None,
            timeout_seconds=TIMEOUT_SECONDS,
            retry=QUICK_RETRY,
            compensation=compensation,
            compensation_timeout_seconds=TIMEOUT_SECONDS,
            compensation_retry=QUICK_RETRY,
        )(function)
    tool(timeout_seconds=30, retry=RetrySettings(maximum_attempts=1))(wait_for_file)
    tool(timeout_seconds=TIMEOUT_SECONDS, retry=QUICK_RETRY)(note_call)


def note_call(path: str, label: str) -> str:
    """Append LABEL to the file PATH, a line each time the call runs (the code-mode crash tests
    count them: a call run twice writes two), and return it."""
    with open(path, "a") as file:
        file.write(f"{label}\n")
    return label


def wait_for_file(path: str) -> str:
    """Write PATH.started, then wait (up to 25 s) until PATH exists."""
    Path(f"{path}.started").write_text("started")
    deadline = time.monotonic() + 25
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)
    return f"{Path(path).name} is there"


class CrashPoint:
    def __init__(self, spec: str, marker: Path) -> None:
        when, _, rest = spec.partition(":")
        name, _, nth = rest.rpartition(":") if rest.rpartition(":")[2].isdigit() else (rest, "", "")
        if when not in ("before", "after", "schedule") or not name:
            raise SystemExit(f"bad --crash-at {spec!r}: want before|after|schedule:NAME[:N]")
        self.spec = spec
        self.when = when
        self.name = name  # an activity type may hold a colon itself: `guardrail:NAME`
        self.nth = int(nth) if nth else 1
        self.marker = marker

    def crash(self) -> None:
        with self.marker.open("w") as file:
            file.write(self.spec)
            file.flush()
            os.fsync(file.fileno())
        os.kill(os.getpid(), signal.SIGKILL)


class CrashInterceptor(Interceptor):
    def __init__(self, point: CrashPoint) -> None:
        self.point = point

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _CrashingActivity(next, self.point)

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        point = self.point

        class Inbound(WorkflowInboundInterceptor):
            def init(self, outbound: WorkflowOutboundInterceptor) -> None:
                super().init(_CrashingOutbound(outbound, point))

        return Inbound if point.when == "schedule" else None


_attempts: Counter[str] = Counter()
"""Activity attempts started in this process, by activity type."""


class _CrashingActivity(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, point: CrashPoint) -> None:
        super().__init__(next)
        self.point = point

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        name = activity.info().activity_type
        _attempts[name] += 1
        hit = name == self.point.name and _attempts[name] == self.point.nth
        if hit and self.point.when == "before":
            self.point.crash()
        result = await super().execute_activity(input)
        if hit and self.point.when == "after":
            self.point.crash()
        return result


class _CrashingOutbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, point: CrashPoint) -> None:
        super().__init__(next)
        self.point = point
        self.scheduled = 0
        """This workflow instance's schedules of the activity; with no cache, each workflow task
        replays from the start, so the count is the same on every worker."""

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        if input.activity == self.point.name:
            self.scheduled += 1
            if self.scheduled == self.point.nth and not workflow.unsafe.is_replaying():
                with workflow.unsafe.sandbox_unrestricted():
                    self.point.crash()
        return super().start_activity(input)


async def serve(args: SimpleNamespace) -> None:
    from durable_agent.activities.mcp_config import load_mcp_config
    from durable_agent.activities.mcp_tools import McpTools
    from durable_agent.serving.worker import build_worker, connect
    from tests.helpers import TEST_WORKER_OPTIONS

    register_tools()
    import tests.guardrails_for_tests  # noqa: F401  (its guardrails, which a check may crash in)

    mcp = McpTools(load_mcp_config(args.mcp_config)) if args.mcp_config else None
    client = await connect(args.address)
    interceptors = []
    if args.crash_at:
        interceptors.append(CrashInterceptor(CrashPoint(args.crash_at, Path(args.crash_file))))
    options: dict[str, Any] = {}
    if args.max_cached_workflows == 0:
        # One workflow task at a time. Without a cache, core makes room for another run's task
        # by evicting the run in hand, and a run evicted while its `resolve_tools` local
        # activity ran lost its task unanswered: the server retried it only after the task
        # timeout, stretched from the 4th attempt on (docs/testing.md, "A stall ...").
        options["max_concurrent_workflow_tasks"] = 1
    worker = build_worker(
        client,
        args.task_queue,
        interceptors=interceptors,
        # No cache and so no sticky queue (the default): a workflow task goes to whichever
        # worker is alive, at once, and each one replays the history from the start.
        max_cached_workflows=args.max_cached_workflows,
        mcp=mcp,
        **options,
        **TEST_WORKER_OPTIONS,
    )
    async with worker:
        Path(args.ready_file).write_text(str(os.getpid()))
        await asyncio.Event().wait()


@click.command(cls=Command)
@click.option("--address", required=True)
@click.option("--task-queue", required=True)
@click.option("--ready-file", required=True)
@click.option("--crash-at")
@click.option("--crash-file")
@click.option("--max-cached-workflows", type=int, default=0)
@click.option("--mcp-config")
def command_line(**options: Any) -> SimpleNamespace:
    if options["crash_at"] and not options["crash_file"]:
        refuse("--crash-at needs --crash-file")
    return SimpleNamespace(**options)


def main() -> None:
    asyncio.run(serve(parse(command_line, prog="crash_worker")))


if __name__ == "__main__":
    main()
