"""Start and steer agent runs from application code.

    client = await AgentClient.connect("localhost:7233")
    run = await client.start(AgentInput(prompt="Cancel order 104999", plan=True))
    print((await run.status()).plan)
    await run.approve_plan("go ahead")
    result = await run.result()

A thin, typed layer over the Temporal client: everything it does can also be done with the
`temporal` CLI or the Web UI (docs/client.md, docs/people-in-the-loop.md).
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient, WorkflowStreamItem
from temporalio.service import RPCError

import payload_codec
from activities import telemetry
from workflows.agent import AgentWorkflow
from workflows.models import (
    DEFAULT_TASK_QUEUE,
    EVENTS_TOPIC,
    SEARCH_ATTRIBUTES,
    AgentEvent,
    AgentInput,
    AgentResult,
    EarlierSteps,
    FailureDetails,
    PlanDecision,
    PlanState,
    RunStatus,
    StepRecord,
    ToolApproval,
    ToolCallDecision,
    TracePage,
    TracePageRequest,
    TranscriptPageRequest,
)
from workflows.reporting import run_details, run_summary
from workflows.transcript import Message

AWAITING_APPROVAL_QUERY = "AgentStatus='awaiting_approval'"
CLOSED_RUNS_QUERY = (
    "WorkflowType='AgentWorkflow' AND (ExecutionStatus='Completed' OR ExecutionStatus='Failed')"
)
"""The runs `closed_runs` reads: those that ended with an answer, and those that failed."""
READ_CONCURRENCY = 16
"""Results `closed_runs` fetches at once (one history read each)."""
CLOSED_QUERY_TIMEOUT = timedelta(seconds=10)
"""A closed run answers a query only when a worker of its task queue replays it."""

TRANSCRIPT_PAGE_BYTES = 1_000_000
"""The JSON a transcript or trace page holds at most: half what a query may answer, for the
envelope."""
STREAM_POLL_COOLDOWN = timedelta(milliseconds=100)
"""How often a caught-up subscriber asks for more (each ask is an update in the run's history)."""

_log = logging.getLogger(__name__)


async def ensure_search_attributes(client: Client) -> None:
    """Register the run's search attributes (AgentStatus, AgentStep, AgentCostUsd, AgentError)
    if the server lacks them: the workflow sets them, and a server that does not know them
    fails the workflow's task."""
    namespace = client.namespace
    known = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    have = {**known.system_attributes, **known.custom_attributes}
    missing = {
        key.name: IndexedValueType.ValueType(key.indexed_value_type)
        for key in SEARCH_ATTRIBUTES
        if key.name not in have
    }
    if not missing:
        return
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(search_attributes=missing, namespace=namespace)
        )
    except RPCError as error:
        flags = " ".join(f"--name {k.name} --type {_CLI_TYPES[k.name]}" for k in SEARCH_ATTRIBUTES)
        raise RuntimeError(
            f"the search attributes {sorted(missing)} are not registered in namespace "
            f"{namespace!r} and this worker may not add them ({error.message}); ask an operator "
            f"to run: temporal operator search-attribute create --namespace {namespace} {flags}"
        ) from error
    _log.info("registered search attributes %s", sorted(missing))


_CLI_TYPES = {
    "AgentStatus": "Keyword",
    "AgentStep": "Int",
    "AgentCostUsd": "Double",
    "AgentError": "Keyword",
}


class AgentRunFailed(Exception):
    """A run ended without an answer: `type` is the error class name (AgentStepLimitExceeded,
    AgentBudgetExceeded, ...), `details` what it had spent and what it undid."""

    def __init__(self, workflow_id: str, type: str, message: str, details: FailureDetails) -> None:
        super().__init__(f"run {workflow_id} failed: {type}: {message}")
        self.workflow_id = workflow_id
        self.type = type
        self.message = message
        self.details = details


class AgentRun:
    """One run, by workflow id."""

    def __init__(self, handle: WorkflowHandle[Any, AgentResult], client: Client) -> None:
        self.handle = handle
        self.client = client

    @property
    def id(self) -> str:
        return self.handle.id

    async def result(self) -> AgentResult:
        """Wait for the answer; raises AgentRunFailed when the run ends without one."""
        try:
            return await self.handle.result()
        except WorkflowFailureError as failure:
            cause = failure.cause
            error_type = getattr(cause, "type", None) or type(cause).__name__
            message = getattr(cause, "message", None) or str(cause)
            raise AgentRunFailed(
                self.id, error_type, message, FailureDetails.of_error(cause)
            ) from failure

    async def status(self) -> RunStatus:
        return await self.handle.query(AgentWorkflow.status)

    async def transcript(self) -> list[Message]:
        """The whole transcript, read page by page (a query's answer may have at most 2 MB)."""
        messages: list[Message] = []
        while True:
            page = await self.handle.query(
                AgentWorkflow.transcript_page,
                TranscriptPageRequest(start=len(messages), max_bytes=TRANSCRIPT_PAGE_BYTES),
            )
            messages.extend(page.messages)
            if not page.messages or len(messages) >= page.total:
                return messages

    async def trace(self) -> list[StepRecord]:
        """One record per step kept (a long run adds its oldest steps up: see full_trace). A
        running run answers the `trace_page` query (a worker must serve it); a completed or
        failed run's records come from its result or its failure's details, so they are read
        without a worker. Only a cancelled, terminated or timed-out run is asked the query,
        which then needs a worker of its task queue."""
        return (await self.full_trace()).step_records

    async def full_trace(self) -> TracePage:
        """The kept step records, all of them, and the steps before them added up."""
        description = await self.handle.describe()
        match description.status:
            case WorkflowExecutionStatus.COMPLETED:
                result = await self.result()
                return _whole_trace(result.step_records, result.earlier_steps)
            case WorkflowExecutionStatus.FAILED:
                try:
                    await self.result()
                except AgentRunFailed as failure:
                    details = failure.details
                    return _whole_trace(details.step_records, details.earlier_steps)
                raise AssertionError(f"run {self.id} is failed but has a result")
            case WorkflowExecutionStatus.RUNNING | None:
                timeout = None
            case _:
                timeout = CLOSED_QUERY_TIMEOUT
        records: list[StepRecord] = []
        while True:
            page = await self.handle.query(
                AgentWorkflow.trace_page,
                TracePageRequest(start=len(records), max_bytes=TRANSCRIPT_PAGE_BYTES),
                rpc_timeout=timeout,
            )
            records.extend(page.step_records)
            if not page.step_records or len(records) >= page.total:
                return _whole_trace(records, page.earlier_steps)

    async def approve_plan(
        self, comment: str | None = None, *, version: int | None = None
    ) -> PlanState:
        """Approve the waiting plan (only `version`, when given). Raises
        temporalio.client.WorkflowUpdateFailedError, saying why, when it cannot be decided."""
        return await self.handle.execute_update(
            AgentWorkflow.decide_plan,
            PlanDecision(approve=True, version=version, comment=comment),
        )

    async def reject_plan(self, feedback: str, *, version: int | None = None) -> PlanState:
        """Reject the waiting plan; the feedback becomes the person's message to the model."""
        return await self.handle.execute_update(
            AgentWorkflow.decide_plan,
            PlanDecision(approve=False, version=version, comment=feedback),
        )

    async def pending_tool_calls(self) -> list[ToolApproval]:
        """The tool calls waiting for a person's decision, oldest first: the run's own, then
        its sub-agent's (`SubAgentApproval`s, their call ids qualified by the delegate call,
        such as `call_1_1/call_2_1`, and naming the sub-agent's workflow)."""
        status = await self.status()
        return [*status.approvals, *status.sub_agent_approvals]

    async def decide_tool_call(
        self, call_id: str, approve: bool, reason: str | None = None, *, remember: bool = False
    ) -> ToolApproval:
        """Approve or deny a waiting call, the run's own or, by its qualified id, its
        sub-agent's (the run forwards the decision and answers once the sub-agent took it);
        `remember` applies the decision to the later calls of the same tool in the run that
        asked. Raises temporalio.client.WorkflowUpdateFailedError, saying why, for an unknown
        or already decided call id."""
        # By name: the SDK types a described async update's result as its coroutine.
        return await self.handle.execute_update(
            "decide_tool_call",
            ToolCallDecision(call_id=call_id, approve=approve, reason=reason, remember=remember),
            result_type=ToolApproval,
        )

    async def events(
        self, from_offset: int = 0, *, poll_cooldown: timedelta = STREAM_POLL_COOLDOWN
    ) -> AsyncIterator[WorkflowStreamItem[AgentEvent]]:
        """The run's progress events from `from_offset`, as they happen, across continue-as-new;
        for a run that has ended, what is left, then the end. Each item's `offset` is where to
        resume (`offset + 1`) after a reconnect."""
        stream = WorkflowStreamClient.create(self.client, self.id)
        async for item in stream.subscribe(
            EVENTS_TOPIC, from_offset, result_type=AgentEvent, poll_cooldown=poll_cooldown
        ):
            yield item


class AgentClient:
    def __init__(self, client: Client, task_queue: str = DEFAULT_TASK_QUEUE) -> None:
        self.client = client
        self.task_queue = task_queue
        self._search_attributes_checked = False

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        namespace: str = "default",
        task_queue: str = DEFAULT_TASK_QUEUE,
    ) -> AgentClient:
        client = await Client.connect(
            address,
            namespace=namespace,
            data_converter=payload_codec.data_converter(),
            interceptors=telemetry.interceptors(),
        )
        return cls(client, task_queue)

    async def start(self, agent_input: AgentInput, *, workflow_id: str | None = None) -> AgentRun:
        """Start a run. The first start checks that the server knows the run's search attributes
        (registering them if allowed): a run on a server without them could not report.

        The run carries a static summary (its label and the start of its prompt) and static
        details (its model, limits and tools), which the Web UI shows on its page and
        `temporal workflow describe` prints; like every payload, they are encrypted when keys
        are set."""
        if not self._search_attributes_checked:
            await ensure_search_attributes(self.client)
            self._search_attributes_checked = True
        handle = await self.client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=workflow_id or f"agent-{uuid.uuid4().hex[:12]}",
            task_queue=self.task_queue,
            memo={"label": agent_input.label} if agent_input.label else None,
            static_summary=run_summary(agent_input),
            static_details=run_details(agent_input),
        )
        return AgentRun(handle, self.client)

    def run(self, workflow_id: str) -> AgentRun:
        """A run started elsewhere (by another process, the CLI, or the Web UI)."""
        return AgentRun(
            self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id), self.client
        )

    async def awaiting_approval(self) -> AsyncIterator[AgentRun]:
        """The runs whose plan waits for a person, found through the AgentStatus attribute."""
        async for execution in self.client.list_workflows(AWAITING_APPROVAL_QUERY):
            yield self.run(execution.id)

    async def closed_runs(
        self, limit: int = 500, *, label: str | None = None
    ) -> AsyncIterator[ClosedRun]:
        """The runs that completed or failed, newest first, each with its result or its failure
        (found through visibility, which is eventually consistent: a run that just ended may be
        missing). `label` keeps the runs whose AgentInput.label is that (read from the memo
        while listing, so no other run's result is fetched); `limit` bounds the runs read."""
        batch: list[tuple[WorkflowExecution, str | None]] = []
        read = 0
        async for execution in self.client.list_workflows(CLOSED_RUNS_QUERY):
            run_label = await _memo_label(execution)
            if label is not None and run_label != label:
                continue
            batch.append((execution, run_label))
            read += 1
            if len(batch) == READ_CONCURRENCY or read == limit:
                for closed in await asyncio.gather(*(self._closed(*b) for b in batch)):
                    yield closed
                batch = []
            if read == limit:
                return
        for closed in await asyncio.gather(*(self._closed(*b) for b in batch)):
            yield closed

    async def _closed(self, execution: WorkflowExecution, label: str | None) -> ClosedRun:
        handle = self.client.get_workflow_handle_for(
            AgentWorkflow.run, execution.id, run_id=execution.run_id
        )
        try:
            result = await AgentRun(handle, self.client).result()
        except AgentRunFailed as failure:
            return ClosedRun(execution.id, label, failure=failure)
        except (RPCError, ValueError, TypeError, KeyError) as error:
            # Gone since it was listed (retention), a result of another shape, or one encrypted
            # with a key this client does not have (KeyError: unknown encoding): not counted.
            return ClosedRun(execution.id, label, error=f"{type(error).__name__}: {error}")
        return ClosedRun(execution.id, label, result=result)


async def _memo_label(execution: WorkflowExecution) -> str | None:
    try:
        label = await execution.memo_value("label", None)
    except (ValueError, TypeError, KeyError):
        return None
    return label if isinstance(label, str) else None


@dataclass(frozen=True)
class ClosedRun:
    """A run that ended: `result` when it completed, `failure` when it failed, `error` when its
    outcome could not be read."""

    workflow_id: str
    label: str | None
    result: AgentResult | None = None
    failure: AgentRunFailed | None = None
    error: str | None = None


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below
    it (p in (0, 100])."""
    if not values:
        raise ValueError("the percentile of no values")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} is not in (0, 100]")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class StepStats:
    """The distribution of one kind of task's completed runs, and the step limit it suggests.

    Seed 000: set `max_steps` from the observed distribution. The recommendation is twice the
    p95 of the steps; `cut_short` counts the completed runs that took more steps than that,
    i.e. the answers that limit would have turned into failures."""

    label: str
    runs: int
    """Completed runs: the statistics below are theirs."""
    failed: int
    steps_p50: int | None
    steps_p95: int | None
    steps_max: int | None
    tokens_mean: float | None
    """Input plus output tokens of a run."""
    tokens_p95: int | None
    cost_mean_usd: float | None
    """None when there is no completed run or one of them has an unknown cost."""
    recommended_max_steps: int | None
    cut_short: int


def step_stats(label: str, results: Sequence[AgentResult], failed: int = 0) -> StepStats:
    """The statistics of the completed runs `results` (pure: no I/O)."""
    if not results:
        return StepStats(label, 0, failed, None, None, None, None, None, None, None, 0)
    steps = [r.steps for r in results]
    tokens = [r.usage.total_tokens for r in results]
    costs = [r.usage.cost_usd for r in results]
    p95 = int(percentile(steps, 95))
    recommended = max(1, math.ceil(2 * p95))
    return StepStats(
        label=label,
        runs=len(results),
        failed=failed,
        steps_p50=int(percentile(steps, 50)),
        steps_p95=p95,
        steps_max=max(steps),
        tokens_mean=sum(tokens) / len(tokens),
        tokens_p95=int(percentile(tokens, 95)),
        cost_mean_usd=(
            None
            if any(c is None for c in costs)
            else sum(c for c in costs if c is not None) / len(costs)
        ),
        recommended_max_steps=recommended,
        cut_short=sum(1 for s in steps if s > recommended),
    )


def _whole_trace(records: list[StepRecord], earlier: EarlierSteps | None) -> TracePage:
    return TracePage(step_records=records, start=0, total=len(records), earlier_steps=earlier)
