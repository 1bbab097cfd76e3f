"""Start and steer agent runs from application code.

    client = await AgentClient.connect("localhost:7233")
    run = await client.start(AgentInput(prompt="Cancel order 104999", plan=True))
    print((await run.status()).plan)
    await run.approve_plan("go ahead")
    result = await run.result()

A thin, typed layer over the Temporal client: everything it does can also be done with the
`temporal` CLI or the Web UI (see the README).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities import telemetry
from workflows.agent import AgentWorkflow
from workflows.models import (
    DEFAULT_TASK_QUEUE,
    SEARCH_ATTRIBUTES,
    AgentInput,
    AgentResult,
    FailureDetails,
    PlanDecision,
    PlanState,
    RunStatus,
    Usage,
)
from workflows.transcript import Message

AWAITING_APPROVAL_QUERY = "AgentStatus='awaiting_approval'"

_log = logging.getLogger(__name__)


async def ensure_search_attributes(client: Client) -> None:
    """Register AgentStatus and AgentStep if the server lacks them: the workflow sets them at
    every step, and a server that does not know them fails the workflow's task."""
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


_CLI_TYPES = {"AgentStatus": "Keyword", "AgentStep": "Int"}


class AgentRunFailed(Exception):
    """A run ended without an answer: `type` is the error class name (AgentStepLimitExceeded,
    AgentBudgetExceeded, ...), `details` what it had spent and what it undid."""

    def __init__(self, workflow_id: str, type: str, message: str, details: FailureDetails) -> None:
        super().__init__(f"run {workflow_id} failed: {type}: {message}")
        self.workflow_id = workflow_id
        self.type = type
        self.message = message
        self.details = details


def failure_details(cause: BaseException | None) -> FailureDetails:
    """What a failed run carried in its error: steps, usage, step records, compensations."""
    if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict):
        return FailureDetails.model_validate(cause.details[0])
    return FailureDetails(steps=0, usage=Usage())


class AgentRun:
    """One run, by workflow id."""

    def __init__(self, handle: WorkflowHandle[Any, AgentResult]) -> None:
        self.handle = handle

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
            raise AgentRunFailed(self.id, error_type, message, failure_details(cause)) from failure

    async def status(self) -> RunStatus:
        return await self.handle.query(AgentWorkflow.status)

    async def transcript(self) -> list[Message]:
        return await self.handle.query(AgentWorkflow.transcript)

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
            data_converter=pydantic_data_converter,
            interceptors=telemetry.interceptors(),
        )
        return cls(client, task_queue)

    async def start(self, agent_input: AgentInput, *, workflow_id: str | None = None) -> AgentRun:
        """Start a run. The first start checks that the server knows AgentStatus and AgentStep
        (registering them if allowed): a run on a server without them could not report."""
        if not self._search_attributes_checked:
            await ensure_search_attributes(self.client)
            self._search_attributes_checked = True
        handle = await self.client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=workflow_id or f"agent-{uuid.uuid4().hex[:12]}",
            task_queue=self.task_queue,
            memo={"label": agent_input.label} if agent_input.label else None,
        )
        return AgentRun(handle)

    def run(self, workflow_id: str) -> AgentRun:
        """A run started elsewhere (by another process, the CLI, or the Web UI)."""
        return AgentRun(self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id))

    async def awaiting_approval(self) -> AsyncIterator[AgentRun]:
        """The runs whose plan waits for a person, found through the AgentStatus attribute."""
        async for execution in self.client.list_workflows(AWAITING_APPROVAL_QUERY):
            yield self.run(execution.id)
