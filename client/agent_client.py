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
import base64
import logging
import math
import re
import unicodedata
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from pydantic_core import to_jsonable_python
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.errordetails.v1 import WorkflowNotReadyFailure
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
    WorkflowUpdateFailedError,
)
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamItem
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from ..activities import telemetry
from ..encryption import payload_codec
from ..workflows.activity_io import ModelDelta, StreamProgress
from ..workflows.agent import AgentWorkflow
from ..workflows.decisions import (
    AutoModeChange,
    AutoRules,
    CallbackAnswer,
    PendingCallback,
    PlanDecision,
    PlanState,
    ToolApproval,
    ToolCallDecision,
)
from ..workflows.errors import (
    AgentConfigurationError,
    AgentError,
    AgentInputInvalid,
    AgentInputTooLarge,
)
from ..workflows.events import EVENTS_TOPIC, AgentEvent
from ..workflows.input_limits import (
    MAX_INPUT_BYTES,
    TOO_LARGE,
    InputTooLarge,
    check_comment,
    check_input,
    check_message,
    check_reason,
)
from ..workflows.inputs import (
    DEFAULT_TASK_QUEUE,
    AgentInput,
    AgentResult,
    Limits,
    ToolApprovalPolicy,
)
from ..workflows.model_gateway import MODEL_ACTIVITY
from ..workflows.model_settings import ModelSettings
from ..workflows.paging import (
    EffectsPageRequest,
    TracePage,
    TracePageRequest,
    TranscriptPage,
    TranscriptPageRequest,
)
from ..workflows.payloads import LONE_SURROGATE, check_wire, non_json_number
from ..workflows.refusals import refusal
from ..workflows.run_summary import run_details, run_summary
from ..workflows.state import AppliedEffect, EarlierSteps, FailureDetails, StepRecord, TurnRecord
from ..workflows.status import SEARCH_ATTRIBUTES, RunStatus, starting_search_attributes
from ..workflows.transcript import Message
from . import forking

AWAITING_APPROVAL_QUERY = "AgentStatus='awaiting_approval' AND ExecutionStatus='Running'"
"""The runs that wait for a person. A run that was terminated while it waited keeps its last
AgentStatus; it waits for nobody, and asking it what it waits on would wait for a worker to
replay it."""
CLOSED_RUNS_QUERY = (
    "WorkflowType='AgentWorkflow' AND (ExecutionStatus='Completed' OR ExecutionStatus='Failed'"
    " OR ExecutionStatus='Canceled' OR ExecutionStatus='Terminated'"
    " OR ExecutionStatus='TimedOut')"
)
"""The runs `closed_runs` reads: every run that ended (a run that continued as new goes on)."""
ClosedStatus = Literal["completed", "failed", "canceled", "terminated", "timed_out"]
"""How a run ended, as visibility lists it."""
READ_CONCURRENCY = 16
"""Results `closed_runs` fetches at once (one history read each)."""
CLOSED_QUERY_TIMEOUT = timedelta(seconds=10)
"""A closed run answers a query only when a worker of its task queue replays it."""

TRANSCRIPT_PAGE_BYTES = 1_000_000
"""The JSON a transcript or trace page holds at most: half what a query may answer, for the
envelope."""
DELTA_POLL_INTERVAL = timedelta(milliseconds=100)
"""How often `AgentRun.deltas` reads the run's pending model call: the workers send its
progress at most this often too."""


STREAM_POLL_COOLDOWN = timedelta(milliseconds=100)
"""How soon a caught-up follower asks again, at first."""
STREAM_MAX_POLL_INTERVAL = timedelta(seconds=1)
"""How long a follower of a run that publishes nothing waits between asks, at most: the delay
grows by half from STREAM_POLL_COOLDOWN while nothing comes, and drops back when an event does."""
STREAM_CLOSED_CHECK_ASKS = 5
"""While a followed run publishes nothing, the follower describes it once every this many asks
at STREAM_MAX_POLL_INTERVAL, to end when the run was terminated (which publishes no last event):
a describe at every quiet ask would double what following a quiet run costs the server."""
STREAM_LENGTH_QUERY = "__temporal_workflow_stream_offset"
"""The stream's own query: how many events the run has published, the offset its next one will
have, across continue-as-new (serving/streams.py checks a resume against it)."""
STREAM_POLL_QUERY = "__temporal_workflow_stream_poll"
"""The stream's own query (temporalio.contrib.workflow_streams): the events from an offset, at
once. A query is answered by a worker and recorded nowhere; the stream's update, which waits for
events, adds two events to the run's history every time it is asked."""
RUN_ENDS = ("completed", "failed")
"""The progress events a run publishes last."""

UPDATE_RETRY_FOR = timedelta(seconds=60)
"""How long an update the server did not take is sent again before AgentUpdateNotDelivered (the
SDK's own retries come first: a refusal reaches the client ~13 s after the first try)."""
UPDATE_RETRY_FIRST_DELAY = timedelta(milliseconds=200)
UPDATE_RETRY_MAX_DELAY = timedelta(seconds=5)
"""The pause before each new try doubles from the first delay up to this."""

_log = logging.getLogger(__name__)


REGISTERING_REFUSED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED)
"""What a server answers a client that may not list or register search attributes: Temporal
Cloud, where they are registered with `tcld` or the Cloud UI, not through the operator service;
a server whose authorizer keeps this client to the workflow service."""


class SearchAttributesNotRegistered(AgentConfigurationError):
    """The run's search attributes are missing from the namespace, and this client may not
    register them: the message gives the command that does (`temporal operator ...`, or `tcld`
    on Temporal Cloud)."""


async def ensure_search_attributes(
    client: Client, keys: Sequence[SearchAttributeKey[Any]] = SEARCH_ATTRIBUTES
) -> None:
    """Register the run's search attributes (AgentStatus, AgentStep, AgentCostUsd, AgentError;
    or `keys`) if the namespace lacks them: the workflow sets them, and a namespace that does
    not know them fails the workflow's task. Where this client may not register them (Temporal
    Cloud), the namespace's visibility says whether they exist: if they do, it warns once, with
    the command that registers them, and goes on; if they do not, it raises
    SearchAttributesNotRegistered with that command."""
    try:
        missing = await _unlisted(client, keys)
    except RPCError as error:
        if error.status not in REGISTERING_REFUSED:
            raise
        refusal = error
        missing = await _unknown_to_visibility(client, keys)
    else:
        if not missing:
            return
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={
                        k.name: IndexedValueType.ValueType(k.indexed_value_type) for k in missing
                    },
                )
            )
        except RPCError as error:
            # Refused (no permission, or the namespace has no room for another of a type), or
            # registered meanwhile by another worker: what the namespace has now decides.
            refusal = error
            missing = await _unlisted(client, keys)
        else:
            _log.info("registered search attributes %s", sorted(k.name for k in missing))
            return
    register = _how_to_register(client.namespace, missing or keys)
    if missing:
        raise SearchAttributesNotRegistered(
            f"the search attributes {_typed_names(missing)} are not registered in namespace "
            f"{client.namespace!r}, and this client may not register them ({refusal.message}); "
            f"register them once: {register}"
        )
    warning = (client.namespace, tuple(k.name for k in keys))
    if refusal.status in REGISTERING_REFUSED and warning not in _WARNED:
        _WARNED.add(warning)
        _log.warning(
            "this client may not list or register search attributes in namespace %r (%s); "
            "%s are registered, so runs go on; a namespace that lacks them needs: %s",
            client.namespace,
            refusal.message,
            _typed_names(keys),
            register,
        )


_WARNED: set[tuple[str, tuple[str, ...]]] = set()
"""The namespaces (and attributes) a process has warned of once."""

_TYPE_NAMES = {
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD: "Keyword",
    IndexedValueType.INDEXED_VALUE_TYPE_INT: "Int",
    IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE: "Double",
    IndexedValueType.INDEXED_VALUE_TYPE_BOOL: "Bool",
    IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: "Datetime",
    IndexedValueType.INDEXED_VALUE_TYPE_TEXT: "Text",
    IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST: "KeywordList",
}
"""A search attribute's type as `temporal operator search-attribute create --type` and `tcld`
name it."""

_ANY_VALUE = {
    IndexedValueType.INDEXED_VALUE_TYPE_INT: "0",
    IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE: "0",
    IndexedValueType.INDEXED_VALUE_TYPE_BOOL: "true",
    IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: "'2000-01-01T00:00:00Z'",
}
"""A value of each type for a visibility query (a string for the others)."""


async def _unlisted(
    client: Client, keys: Sequence[SearchAttributeKey[Any]]
) -> list[SearchAttributeKey[Any]]:
    """The keys the namespace's list of search attributes lacks (the operator service's)."""
    known = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    have = {**known.system_attributes, **known.custom_attributes}
    return [key for key in keys if key.name not in have]


async def _unknown_to_visibility(
    client: Client, keys: Sequence[SearchAttributeKey[Any]]
) -> list[SearchAttributeKey[Any]]:
    """The keys a visibility query may not name, asked through the workflow service, which
    every client may use: the server refuses a query on an attribute it does not know."""
    unknown = []
    for key in keys:
        value = _ANY_VALUE.get(IndexedValueType.ValueType(key.indexed_value_type), "''")
        try:
            await client.count_workflows(f"{key.name} = {value}")
        except RPCError as error:
            if error.status != RPCStatusCode.INVALID_ARGUMENT:
                raise
            unknown.append(key)
    return unknown


def _typed_names(keys: Sequence[SearchAttributeKey[Any]]) -> str:
    return ", ".join(f"{k.name} ({_type_name(k)})" for k in keys)


def _type_name(key: SearchAttributeKey[Any]) -> str:
    return _TYPE_NAMES[IndexedValueType.ValueType(key.indexed_value_type)]


def _how_to_register(namespace: str, keys: Sequence[SearchAttributeKey[Any]]) -> str:
    """The commands that register `keys`, for an operator to run once per namespace."""
    names = " ".join(f"--name {k.name} --type {_type_name(k)}" for k in keys)
    cloud = " ".join(f"--search-attribute {k.name}={_type_name(k)}" for k in keys)
    return (
        f"temporal operator search-attribute create --namespace {namespace} {names}; on "
        f"Temporal Cloud: tcld namespace search-attributes add --namespace {namespace} {cloud}"
    )


class AgentRunFailed(Exception):
    """A run ended without an answer: `type` is the error class name (AgentStepLimitExceeded,
    AgentBudgetExceeded, ...), `details` what it had spent and what it undid."""

    def __init__(self, workflow_id: str, type: str, message: str, details: FailureDetails) -> None:
        super().__init__(f"run {workflow_id} failed: {type}: {message}")
        self.workflow_id = workflow_id
        self.type = type
        self.message = message
        self.details = details


NotTaken = Literal["busy", "aborted", "total"]
"""Why the server did not take an update: `busy`, the run has the updates in flight the server
allows (10 as it ships, history.maxInFlightUpdates) or the namespace is over a rate limit;
`aborted`, it was aborted as the run continued as new or its workflow task failed; `total`, the
run has taken the updates the server allows a run (2,000, history.maxTotalUpdates)."""


class AgentUpdateNotDelivered(AgentError):
    """The server did not take an update (a message, a decision, an interrupt, the end) to run
    `workflow_id`, and the client stopped sending it again: nothing reached the run, so sending
    it again is safe. `reason` says why (NotTaken); the message says what to do."""

    def __init__(self, workflow_id: str, update: str, reason: NotTaken, message: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.update = update
        self.reason = reason


class AgentRun:
    """One run, by workflow id. Its updates go to the latest run of its chain (they follow
    continue-as-new); one the server did not take is sent again with the same update id for up
    to `update_retry_for`, then raises AgentUpdateNotDelivered (docs/client.md)."""

    def __init__(
        self,
        handle: WorkflowHandle[Any, AgentResult],
        client: Client,
        *,
        update_retry_for: timedelta = UPDATE_RETRY_FOR,
    ) -> None:
        self.handle = handle
        self.client = client
        self.update_retry_for = update_retry_for

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
        messages, _ = await self._all_pages(
            AgentWorkflow.transcript_page, TranscriptPageRequest, lambda page: page.messages
        )
        return messages

    async def transcript_page(
        self, start: int = 0, max_bytes: int = TRANSCRIPT_PAGE_BYTES
    ) -> TranscriptPage:
        """The transcript's messages from `start`, as many as fit in `max_bytes` of JSON (at
        least one), and how many there are: for a screen that shows a page at a time."""
        request = TranscriptPageRequest(start=start, max_bytes=max_bytes)
        return await self.handle.query(AgentWorkflow.transcript_page, request)

    async def trace_page(self, start: int = 0, max_bytes: int = TRANSCRIPT_PAGE_BYTES) -> TracePage:
        """The kept step records from `start`, a page as transcript_page's; a worker answers it,
        whatever the run's state (`full_trace` reads an ended run's from its result)."""
        request = TracePageRequest(start=start, max_bytes=max_bytes)
        return await self.handle.query(AgentWorkflow.trace_page, request)

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
                whole = _whole_trace(result.step_records, result.earlier_steps)
                return whole.model_copy(update={"tool_notices": result.tool_notices})
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
        records, last = await self._all_pages(
            AgentWorkflow.trace_page, TracePageRequest, lambda page: page.step_records, timeout
        )
        whole = _whole_trace(records, last.earlier_steps)
        return whole.model_copy(update={"tool_notices": last.tool_notices})

    async def side_effects(self) -> list[AppliedEffect]:
        """The run's compensation log, oldest effect first: what it would undo if it failed
        now (a failed run's: what it undid). A completed run's comes from its result; any other
        run answers the `effects_page` query page by page (a worker must serve it)."""
        description = await self.handle.describe()
        if description.status == WorkflowExecutionStatus.COMPLETED:
            return (await self.result()).side_effects
        timeout = (
            None if description.status == WorkflowExecutionStatus.RUNNING else CLOSED_QUERY_TIMEOUT
        )
        effects, _ = await self._all_pages(
            AgentWorkflow.effects_page, EffectsPageRequest, lambda page: page.effects, timeout
        )
        return effects

    async def _all_pages(
        self,
        query: Any,
        request: Callable[..., Any],
        items_of: Callable[[Any], Sequence[Any]],
        timeout: timedelta | None = None,
    ) -> tuple[list[Any], Any]:
        """Every item of a paged query (`transcript_page`, `trace_page`, `effects_page`), page
        by page from the first (a query's answer may have at most 2 MB), and the last page, for
        what it says besides its items."""
        items: list[Any] = []
        while True:
            page = await self.handle.query(
                query,
                request(start=len(items), max_bytes=TRANSCRIPT_PAGE_BYTES),
                rpc_timeout=timeout,
            )
            got = items_of(page)
            items.extend(got)
            if not got or len(items) >= page.total:
                return items, page

    async def approve_plan(
        self, comment: str | None = None, *, version: int | None = None
    ) -> PlanState:
        """Approve the waiting plan (only `version`, when given). Raises
        temporalio.client.WorkflowUpdateFailedError, saying why, when it cannot be decided; its
        cause's type is AgentInputTooLarge for a comment over input_limits.MAX_MESSAGE_CHARS."""
        _refuse_locally(check_comment, comment)
        decision = PlanDecision(approve=True, version=version, comment=comment)
        return await self._update("decide_plan", decision, result_type=PlanState)

    async def reject_plan(self, feedback: str, *, version: int | None = None) -> PlanState:
        """Reject the waiting plan; the feedback becomes the person's message to the model."""
        _refuse_locally(check_comment, feedback)
        decision = PlanDecision(approve=False, version=version, comment=feedback)
        return await self._update("decide_plan", decision, result_type=PlanState)

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
        or already decided call id, and (cause type AgentInputTooLarge) for a reason over
        input_limits.MAX_REASON_CHARS."""
        _refuse_locally(check_reason, reason)
        decision = ToolCallDecision(
            call_id=call_id, approve=approve, reason=reason, remember=remember
        )
        return await self._update("decide_tool_call", decision, result_type=ToolApproval)

    async def pending_callbacks(self) -> list[PendingCallback]:
        """The run's callback-tool calls that wait for a client's answer (docs/tools.md#callback-
        tools): each with its `call_id`, tool name and arguments."""
        return (await self.status()).pending_callbacks

    async def answer_callback(self, call_id: str, result: Any) -> PendingCallback:
        """Answer a callback tool's call with the result the client computed (JSON); answers
        the call as it was asked. Raises temporalio.client.WorkflowUpdateFailedError, saying
        why, when the result does not match the tool's result schema (the call keeps waiting)
        or the call does not wait (answered already, timed out, never asked), and, sending
        nothing, for a NaN or an Infinity in it, which JSON would carry as null."""
        answer = CallbackAnswer(call_id=call_id, result=_json_numbers(to_jsonable_python(result)))
        return await self._update("answer_callback", answer, result_type=PendingCallback)

    async def set_auto_mode(
        self,
        change: AutoModeChange | None = None,
        /,
        *,
        off: bool = False,
        rules: AutoRules | None = None,
    ) -> str:
        """For an operator: turn auto mode's judge off for the rest of the run (`off=True`), or
        replace its rules (criteria, which tools they judge, the default); the judge stays. Or
        send `change`, the update's own input, as it came (the HTTP API's body). Calls the judge
        is reviewing go to a person. Answers what holds now. Raises
        temporalio.client.WorkflowUpdateFailedError when the run has no auto mode to change."""
        if change is not None and (off or rules is not None):
            raise TypeError("set_auto_mode takes a change, or off or rules, not both")
        change = change or AutoModeChange(off=off, rules=rules)
        return await self._update("set_auto_mode", change, result_type=str)

    async def _update(self, name: str, *args: Any, result_type: type) -> Any:
        """Every update the client sends: to the latest run of the chain, so that one sent
        again after a continue-as-new reaches the next run, and with one update id for all its
        tries, so that the server takes it once. Sent again only when the server says it did
        not take it (NotTaken), which makes every try but the one taken a no-op."""
        _refuse_oversized(name, self.client.data_converter.payload_converter.to_payloads(args))
        handle = self.client.get_workflow_handle(
            self.id, first_execution_run_id=self.handle.first_execution_run_id
        )
        update_id = f"{name}-{uuid.uuid4()}"
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.update_retry_for.total_seconds()
        delay = UPDATE_RETRY_FIRST_DELAY.total_seconds()
        while True:
            try:
                return await handle.execute_update(
                    name, args=args, id=update_id, result_type=result_type
                )
            except RPCError as error:
                reason = _not_taken(error)
                if reason is None:
                    raise
                if reason == "total" or loop.time() + delay > give_up:
                    raise AgentUpdateNotDelivered(
                        self.id, name, reason, _not_delivered(self.id, name, reason, error)
                    ) from error
                _log.info(
                    "run %s did not take update %s (%s): sending it again in %.1f s",
                    self.id,
                    name,
                    error.message,
                    delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, UPDATE_RETRY_MAX_DELAY.total_seconds())

    # --- a conversation (AgentInput.conversation; docs/conversations.md) ----------------------

    async def send(self, text: str) -> TurnRecord:
        """Send a message to the conversation and wait for the turn it belongs to: its answer
        is `.answer` (None when it was interrupted or hit its step limit: see `.outcome`). A
        message sent while a turn works steers that turn. Raises
        temporalio.client.WorkflowUpdateFailedError, saying why, for an empty message or one
        to a conversation that has ended; its cause's type is AgentInputTooLarge for a message
        over input_limits.MAX_MESSAGE_CHARS, or one that would take the messages waiting for
        the turn over MAX_QUEUED_MESSAGE_BYTES (send it again once the turn has taken them)."""
        return await self.turn(await self.post(text))

    async def post(self, text: str) -> int:
        """Send a message without waiting for the turn: answers the turn it belongs to."""
        _refuse_locally(check_message, text)
        return await self._update("send_message", text, result_type=int)

    async def turn(self, number: int) -> TurnRecord:
        """Wait for turn `number` to finish, and answer its record. Raises AgentRunFailed when
        the conversation failed first, and LookupError when it ended without that turn."""
        async for _ in self.turn_events(number):
            pass
        description = await self.handle.describe()
        if description.status == WorkflowExecutionStatus.RUNNING:
            status = await self.status()
            turns = status.conversation.turns if status.conversation else []
        else:
            turns = (await self.result()).turns
        found = [t for t in turns if t.turn == number and t.outcome != "working"]
        if not found:
            raise LookupError(f"conversation {self.id} has no finished turn {number}")
        return found[0]

    async def turn_events(self, number: int) -> AsyncIterator[AgentEvent]:
        """The progress events of turn `number`, as they happen: from its `turn_started` to its
        `turn_finished` (or the conversation's end)."""
        inside = False
        async for item in self.events():
            event = item.data
            if event.kind == "turn_started" and event.turn == number:
                inside = True
            if inside:
                yield event
            if event.kind == "turn_finished" and event.turn == number:
                return
            if event.kind in ("completed", "failed"):
                return

    async def interrupt(self) -> int:
        """Stop the working turn (docs/conversations.md says what stops and what finishes);
        answers its number. The conversation then waits for the next message."""
        return await self._update("interrupt", result_type=int)

    async def end(self) -> AgentResult:
        """End the conversation (a working turn is interrupted first) and answer its result,
        with every turn in `.turns`."""
        await self._update("end_conversation", result_type=int)
        return await self.result()

    async def events(
        self, from_offset: int = 0, *, poll_cooldown: timedelta = STREAM_POLL_COOLDOWN
    ) -> AsyncGenerator[WorkflowStreamItem[AgentEvent]]:
        """The run's progress events from `from_offset`, as they happen, across continue-as-new;
        for a run that has ended, what is left, then the end. Each item's `offset` is where to
        resume (`offset + 1`) after a reconnect; none is below `from_offset`, even one past the
        last event (the events from there come as the run publishes them).

        The events are read by query, which writes nothing to the run's history, so following a
        run costs it nothing (docs/performance.md, "Following a run"). While nothing comes, the
        asks slow from `poll_cooldown` to STREAM_MAX_POLL_INTERVAL; only at that pace, at its
        first ask and then at every STREAM_CLOSED_CHECK_ASKS-th, does it describe the run, to
        end when the run was terminated (a terminated run publishes no last event, so its
        follower ends up to about ten seconds after it)."""
        pause = poll_cooldown.total_seconds()
        quiet_asks = 0
        offset = from_offset
        # The workflow id alone: the latest run of the chain, which holds the stream's events.
        handle = self.client.get_workflow_handle(self.id)
        converter = self.client.data_converter.payload_converter
        while True:
            try:
                page = await handle.query(
                    STREAM_POLL_QUERY,
                    PollInput(topics=[EVENTS_TOPIC], from_offset=offset),
                    result_type=PollResult,
                )
            except RPCError:
                # No worker answered yet (one restarting, say), or the run is gone: ask again
                # only while it runs.
                if await self._closed():
                    raise
                page = PollResult(next_offset=offset)
            ended = False
            for wire in page.items:
                event = converter.from_payload(_payload_of(wire.data), AgentEvent)
                ended = event.kind in RUN_ENDS
                yield WorkflowStreamItem(topic=wire.topic, data=event, offset=wire.offset)
            # Past the last event, the page's next offset is the stream's end: keep the one asked.
            offset = max(offset, page.next_offset)
            if page.more_ready:
                continue
            if ended:
                return
            if page.items:
                pause = poll_cooldown.total_seconds()
                quiet_asks = 0
            elif pause < STREAM_MAX_POLL_INTERVAL.total_seconds():
                pause = min(pause * 1.5, STREAM_MAX_POLL_INTERVAL.total_seconds())
            else:
                # A terminated run publishes no last event. Asked only once the asks have
                # slowed to their longest, so a follower in the short quiet of a model call
                # does not describe the run on every empty page; then only at every few asks,
                # so a run that waits days for a person costs about one request a second.
                if quiet_asks % STREAM_CLOSED_CHECK_ASKS == 0 and await self._closed():
                    return
                quiet_asks += 1
            await asyncio.sleep(pause)

    async def _closed(self) -> bool:
        """The run has ended, and did not continue as new."""
        status = (await self.client.get_workflow_handle(self.id).describe()).status
        return status not in (WorkflowExecutionStatus.RUNNING, None)

    async def deltas(
        self, *, interval: timedelta = DELTA_POLL_INTERVAL
    ) -> AsyncIterator[ModelDelta]:
        """The text (and reasoning summaries) of the run's streaming model calls as they are
        written (`ModelSettings(stream=True)`), until the run ends. A delta of kind "void" says
        that an attempt failed and what it streamed is void: its retry streams anew.

        Read from the model activity's heartbeats (describe, every `interval`): no history event
        per delta. A live view, best effort: the last ~100 ms of a call may end before it is
        read, and a sub-agent's calls are its own run's. The transcript has every reply whole."""
        reader = DeltaReader()
        while True:
            now = await self.model_calls()
            for call in now.calls:
                for delta in reader.read(call.progress, call.attempt):
                    yield delta
            if not now.running:
                return
            await asyncio.sleep(interval.total_seconds())

    async def model_calls(self) -> ModelCalls:
        """The run's pending model calls, each with what it has streamed so far, by one describe
        of its latest run (it follows continue-as-new); what `deltas` reads at each interval."""
        description = await self.client.get_workflow_handle(self.id).describe()
        calls = []
        for pending in description.raw_description.pending_activities:
            if pending.activity_type.name != MODEL_ACTIVITY:
                continue
            progress = None
            if pending.heartbeat_details.payloads:
                decoded = await self.client.data_converter.decode(
                    pending.heartbeat_details.payloads, [StreamProgress]
                )
                progress = decoded[0] if isinstance(decoded[0], StreamProgress) else None
            # A streaming call beats with its progress at once; a beat without details is a
            # call that does not stream.
            beaten = pending.HasField("last_heartbeat_time")
            calls.append(ModelCall(progress, pending.attempt, beaten and progress is None))
        running = description.status == WorkflowExecutionStatus.RUNNING
        return ModelCalls(running, calls)


@dataclass(frozen=True)
class ModelCall:
    """A pending model call: what it has streamed (None: nothing yet, or it does not stream),
    its attempt, and whether it is known not to stream (it has beaten without progress)."""

    progress: StreamProgress | None
    attempt: int
    not_streaming: bool


@dataclass(frozen=True)
class ModelCalls:
    """A run's pending model calls, and whether it runs (a run that ended has none to come)."""

    running: bool
    calls: list[ModelCall]


class DeltaReader:
    """Successive snapshots of streaming calls' progress, as deltas: what each adds, and a void
    when an attempt was given up (a newer attempt of its step, or a retry that has not beaten
    yet)."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._text = 0
        self._reasoning = 0
        self._void: set[tuple[int, int]] = set()

    def read(self, progress: StreamProgress | None, pending_attempt: int) -> list[ModelDelta]:
        if progress is None:
            return []
        key = (progress.step, progress.attempt)
        out: list[ModelDelta] = []
        if key in self._void:
            return out
        if pending_attempt > progress.attempt:  # the snapshot is of a failed attempt
            return self._voided(key)
        if self._key != key:
            if self._key is not None and self._key[0] == key[0]:
                out += self._voided(self._key)
            self._key, self._text, self._reasoning = key, 0, 0
        step, attempt = key
        text_end = progress.text_offset + len(progress.text)
        if text_end > self._text:
            start = max(self._text - progress.text_offset, 0)
            out.append(
                ModelDelta(step=step, attempt=attempt, kind="text", text=progress.text[start:])
            )
            self._text = text_end
        reasoning_end = progress.reasoning_offset + len(progress.reasoning)
        if reasoning_end > self._reasoning:
            start = max(self._reasoning - progress.reasoning_offset, 0)
            out.append(
                ModelDelta(
                    step=step, attempt=attempt, kind="reasoning", text=progress.reasoning[start:]
                )
            )
            self._reasoning = reasoning_end
        return out

    def _voided(self, key: tuple[int, int]) -> list[ModelDelta]:
        self._void.add(key)
        if self._key != key:
            return []
        self._key = None
        return [ModelDelta(step=key[0], attempt=key[1], kind="void")]


class AgentClient:
    """Start and find agent runs. `AgentClient(client)` takes the app's own client, connected
    with `plugins=[AgentPlugin()]`; raises AgentConfigurationError for a client whose converter
    cannot carry the agent's pydantic models. `update_retry_for`: how long each run's updates
    are sent again while the server does not take them (AgentRun)."""

    def __init__(
        self,
        client: Client,
        task_queue: str = DEFAULT_TASK_QUEUE,
        *,
        update_retry_for: timedelta = UPDATE_RETRY_FOR,
    ) -> None:
        converter = client.data_converter.payload_converter_class
        if not issubclass(converter, PydanticPayloadConverter):
            raise AgentConfigurationError(
                f"AgentClient: the client's payload converter ({converter.__name__}) cannot "
                "carry the agent's pydantic models: connect it with "
                "plugins=[durable_agent.AgentPlugin()]"
            )
        self.client = client
        self.task_queue = task_queue
        self.update_retry_for = update_retry_for
        self._search_attributes_checked = False
        self._fork_attributes_checked = False

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        namespace: str = "default",
        task_queue: str = DEFAULT_TASK_QUEUE,
        update_retry_for: timedelta = UPDATE_RETRY_FOR,
    ) -> AgentClient:
        client = await Client.connect(
            address,
            namespace=namespace,
            data_converter=payload_codec.data_converter(),
            interceptors=telemetry.interceptors(),
        )
        return cls(client, task_queue, update_retry_for=update_retry_for)

    async def start(
        self,
        agent_input: AgentInput,
        *,
        workflow_id: str | None = None,
        memo: dict[str, Any] | None = None,
        search_attributes: TypedSearchAttributes | None = None,
        task_queue: str | None = None,
    ) -> AgentRun:
        """Start a run. The first start checks that the server knows the run's search attributes
        (registering them if allowed): a run on a server without them could not report. The
        start sets AgentStatus running, AgentStep 0 and AgentCostUsd 0 beside
        `search_attributes`, so the run need not upsert them as it begins.
        `memo` is the run's memo (by default its label).

        The run carries a static summary (its label and the start of its prompt) and static
        details (its model, limits and tools), which the Web UI shows on its page and
        `temporal workflow describe` prints; like every payload, they are encrypted when keys
        are set. Raises, sending nothing, AgentInputInvalid for an input that would not decode
        as a worker decodes it (a field set to None after it was built, say: the run would fail
        with it as it started), and AgentInputTooLarge for one over
        input_limits.MAX_INPUT_BYTES (likewise); AgentInputInvalid too for a `workflow_id` with
        a control character or a lone surrogate (`_check_workflow_id`)."""
        if workflow_id:
            _check_workflow_id(workflow_id)
        try:
            check_input(len(check_wire(agent_input)), len(agent_input.prompt))
        except InputTooLarge as refused:
            raise AgentInputTooLarge(str(refused)) from None
        if not self._search_attributes_checked:
            await ensure_search_attributes(self.client)
            self._search_attributes_checked = True
        handle = await self.client.start_workflow(
            AgentWorkflow.run,
            agent_input,
            id=workflow_id or f"agent-{uuid.uuid4().hex[:12]}",
            task_queue=task_queue or self.task_queue,
            memo=memo
            if memo is not None
            else ({"label": agent_input.label} if agent_input.label else None),
            search_attributes=starting_search_attributes(search_attributes),
            static_summary=run_summary(agent_input),
            static_details=run_details(agent_input),
        )
        return AgentRun(handle, self.client, update_retry_for=self.update_retry_for)

    async def fork(
        self,
        workflow_id: str,
        *,
        step: int,
        model: ModelSettings | None = None,
        system: str | None = None,
        limits: Limits | None = None,
        tool_approval: ToolApprovalPolicy | None = None,
        label: str | None = None,
        fork_id: str | None = None,
        task_queue: str | None = None,
        call: str | None = None,
    ) -> AgentRun:
        """Start a new run from run `workflow_id`'s step `step` (0: from its prompt), with
        another model, system prompt or limits (the original's where None). Its transcript
        begins as the original's through step `step`'s tool results, read from the original's
        history; those steps' tools do not run again, and their side effects stay the
        original's. Its limits count from the fork point; tool approval is on unless
        `tool_approval` says otherwise. It runs on `task_queue`, else the original's queue.
        Raises forking.ForkError, saying why, when the run cannot be forked there (a step past
        its last, ForkStepOutOfRange: the message has its step count). With `call`, the id of
        a call of step `step`'s code-mode script (`script_1.3`), the fork starts inside that
        script: step `step`'s reply is the original's, the script resumes from the state it
        had when it asked for that call, and that call and the rest run afresh
        (docs/code-mode.md#forks-and-continue-as-new)."""
        recorded = await forking.read_run(self.client, workflow_id)
        fork_input = recorded.fork_input(
            step,
            model=model,
            system=system,
            limits=limits,
            tool_approval=tool_approval,
            label=label,
            call=call,
        )
        if not self._fork_attributes_checked:
            await ensure_search_attributes(self.client, forking.FORK_SEARCH_ATTRIBUTES)
            self._fork_attributes_checked = True
        assert fork_input.fork is not None
        memo: dict[str, Any] = {"forked_from": forking.forked_from_memo(fork_input.fork.origin)}
        if fork_input.label:
            memo["label"] = fork_input.label
        return await self.start(
            fork_input,
            workflow_id=fork_id or f"{workflow_id}-fork-{uuid.uuid4().hex[:8]}",
            memo=memo,
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(forking.AGENT_FORKED_FROM, workflow_id)]
            ),
            task_queue=task_queue or recorded.task_queue or self.task_queue,
        )

    async def forks_of(self, workflow_id: str) -> list[str]:
        """The workflow ids of the forks of run `workflow_id`, newest first (through the
        AgentForkedFrom search attribute: visibility is eventually consistent)."""
        query = f"{forking.AGENT_FORKED_FROM.name}='{workflow_id}'"
        return [execution.id async for execution in self.client.list_workflows(query)]

    def run(self, workflow_id: str) -> AgentRun:
        """A run started elsewhere (by another process, the CLI, or the Web UI)."""
        return AgentRun(
            self.client.get_workflow_handle_for(AgentWorkflow.run, workflow_id),
            self.client,
            update_retry_for=self.update_retry_for,
        )

    async def awaiting_approval(self, limit: int | None = None) -> AsyncIterator[AgentRun]:
        """The runs that wait for a person, found through the AgentStatus attribute (at most
        `limit`, newest first)."""
        async for execution in self.client.list_workflows(AWAITING_APPROVAL_QUERY, limit=limit):
            yield self.run(execution.id)

    async def closed_runs(
        self, limit: int = 500, *, label: str | None = None
    ) -> AsyncIterator[ClosedRun]:
        """The runs that ended, newest first: each that completed with its result, each that
        failed with its failure, and those cancelled, terminated or timed out with how they
        ended (found through visibility, which is eventually consistent: a run that just ended
        may be missing). `label` keeps the runs whose AgentInput.label is that (read from the
        memo while listing, so no other run's result is fetched); `limit` bounds the runs
        read."""
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
        status = _closed_status(execution.status)
        if status not in ("completed", "failed"):
            return ClosedRun(execution.id, label, status)  # no answer and no failure to read
        handle = self.client.get_workflow_handle_for(
            AgentWorkflow.run, execution.id, run_id=execution.run_id
        )
        try:
            result = await AgentRun(handle, self.client).result()
        except AgentRunFailed as failure:
            return ClosedRun(execution.id, label, status, failure=failure)
        except (RPCError, ValueError, TypeError, KeyError) as error:
            # Gone since it was listed (retention), a result of another shape, or one encrypted
            # with a key this client does not have (KeyError: unknown encoding).
            return ClosedRun(execution.id, label, status, error=f"{type(error).__name__}: {error}")
        return ClosedRun(execution.id, label, status, result=result)


def _closed_status(status: WorkflowExecutionStatus | None) -> ClosedStatus:
    match status:
        case WorkflowExecutionStatus.FAILED:
            return "failed"
        case WorkflowExecutionStatus.CANCELED:
            return "canceled"
        case WorkflowExecutionStatus.TERMINATED:
            return "terminated"
        case WorkflowExecutionStatus.TIMED_OUT:
            return "timed_out"
        case _:
            return "completed"


async def _memo_label(execution: WorkflowExecution) -> str | None:
    try:
        label = await execution.memo_value("label", None)
    except (ValueError, TypeError, KeyError):
        return None
    return label if isinstance(label, str) else None


@dataclass(frozen=True)
class ClosedRun:
    """A run that ended, as `status` says: `result` when it completed, `failure` when it failed,
    `error` when its outcome could not be read; a run cancelled, terminated or timed out has
    none of them."""

    workflow_id: str
    label: str | None
    status: ClosedStatus
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

    Set `max_steps` from the observed distribution. The recommendation is twice the
    p95 of the steps; `cut_short` counts the completed runs that took more steps than that,
    i.e. the answers that limit would have turned into failures."""

    label: str
    runs: int
    """Every run of the label that ended: completed + failed + other."""
    completed: int
    """The runs that answered: the statistics below are theirs."""
    failed: int
    other: int
    """Runs cancelled, terminated or timed out, and those whose outcome could not be read."""
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


def step_stats(
    label: str, results: Sequence[AgentResult], failed: int = 0, other: int = 0
) -> StepStats:
    """The statistics of the completed runs `results`, beside the counts of the label's runs
    that `failed` or ended `other`wise (pure: no I/O)."""
    runs = len(results) + failed + other
    if not results:
        return StepStats(
            label, runs, 0, failed, other, None, None, None, None, None, None, None, cut_short=0
        )
    steps = [r.steps for r in results]
    tokens = [r.usage.total_tokens for r in results]
    costs = [r.usage.cost_usd for r in results]
    p95 = int(percentile(steps, 95))
    recommended = max(1, math.ceil(2 * p95))
    return StepStats(
        label=label,
        runs=runs,
        completed=len(results),
        failed=failed,
        other=other,
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


def _not_taken(error: RPCError) -> NotTaken | None:
    """Why the server did not take an update, when it says so; None for any other error (the
    run is gone, the server cannot be reached, ...), which the client raises as it came."""
    if error.status == RPCStatusCode.RESOURCE_EXHAUSTED:
        return "busy"
    if error.status == RPCStatusCode.UNAVAILABLE and "update was aborted" in error.message:
        return "aborted"  # by a continue-as-new, after the server's own tries for the next run
    if error.status == RPCStatusCode.FAILED_PRECONDITION:
        # "limit on number of total updates has been reached (2000)", and since server 1.32
        # "The limit on the total number of distinct updates in this workflow ...".
        if re.search(r"total (number of distinct )?updates", error.message):
            return "total"
        # The workflow task that carried it failed (a signal came while the run continued as
        # new, say): that task's work is discarded, the update with it.
        if any(d.Is(WorkflowNotReadyFailure.DESCRIPTOR) for d in error.grpc_status.details):
            return "aborted"
    return None


def _not_delivered(workflow_id: str, name: str, reason: NotTaken, error: RPCError) -> str:
    """What happened to the update, and what to do, in one line."""
    # The server's messages name its cap: "... has been reached (10)".
    cap = re.search(r"reached \((\d+)\)", error.message)
    many = f"{cap.group(1)} updates" if cap else "all the updates"
    refused = f"run {workflow_id} did not take update {name}"
    nothing = "nothing reached the run"
    match reason:
        case "busy" if "in-flight" in error.message:
            return (
                f"{refused}: it has {many} in flight, the most the server allows a run, and "
                f"none finished while the client tried; {nothing}: send it again once the "
                "run's worker has taken them (is one serving its task queue?)"
            )
        case "busy":
            return f"{refused}: the server is busy ({error.message}); {nothing}: send it again"
        case "aborted":
            return (
                f"{refused}: the server aborted it each time the client tried, as the run "
                f"continued as new or its workflow task failed ({error.message}); {nothing}: "
                "send it again"
            )
        case "total":
            return (
                f"{refused}: it has taken {many}, the most the server allows a run, and takes "
                "more once it continues as new (at its next step boundary, or while it waits "
                f"for a message); {nothing}: send it again then, or now as a signal of the same "
                "name (the run takes send_message, interrupt, end_conversation, "
                "decide_tool_call, approve_plan and reject_plan as signals)"
            )


def _check_workflow_id(workflow_id: str) -> None:
    """AgentInputInvalid for an id with a control character (Unicode's Cc: U+0000 to U+001F,
    U+007F to U+009F), which Temporal takes and which breaks every line that shows the id (a
    log, the CLI's, the console's, a visibility query), or a lone surrogate, which no request
    can carry."""
    for at, character in enumerate(workflow_id):
        kind = unicodedata.category(character)
        if kind == "Cs":
            raise AgentInputInvalid(f"workflow_id: {LONE_SURROGATE}")
        if kind == "Cc":
            raise AgentInputInvalid(
                f"workflow_id: a control character (U+{ord(character):04X}) at {at}:"
                " an id is shown, logged and searched as text"
            )


def _refuse_locally(check: Callable[[Any], None], text: str | None) -> None:
    """Refuse text over its bound before sending it, as the run's validator would: the same
    error, so a caller handles one, and a text the server would not take is never sent."""
    try:
        check(text)
    except InputTooLarge as refused:
        reason = str(refused)
    else:
        return
    # The cause is the run's refusal (`from` would replace it).
    raise WorkflowUpdateFailedError(ApplicationError(reason, type=TOO_LARGE, non_retryable=True))


def _refuse_oversized(name: str, payloads: Sequence[Payload]) -> None:
    """Refuse an update whose input is over MAX_INPUT_BYTES before sending it. The run's
    validator cannot: the worker's answer to an update, accepted or refused, carries its input
    back, and past Temporal's 2 MB payload limit that answer fails the workflow task instead.
    Each try fails the run's task again, and the caller waits with no answer (a callback's
    3 MB result, a decision's 3 MB call id: the HTTP API took them, under its 4 MB body)."""
    size = sum(payload.ByteSize() for payload in payloads)
    if size > MAX_INPUT_BYTES:
        reason = (
            f"update {name}'s input is {size:,} bytes: a run takes at most {MAX_INPUT_BYTES:,} "
            "in one update (MAX_INPUT_BYTES), under Temporal's 2 MB payload limit; send less"
        )
        raise WorkflowUpdateFailedError(
            ApplicationError(reason, type=TOO_LARGE, non_retryable=True)
        )


def _json_numbers(result: Any) -> Any:
    """A callback's result, refused (as the run refuses one) for a NaN or an Infinity in it,
    which JSON would carry as null."""
    where = non_json_number(result)
    if where is not None:
        at = ".".join(map(str, ["result", *where]))
        reason = f"{at} is no JSON number (NaN or ∞): JSON would carry it as null"
        raise WorkflowUpdateFailedError(refusal(reason))
    return result


def _payload_of(wire: str) -> Payload:
    """A stream item's data, as the stream sends it: a serialised Payload in base64."""
    payload = Payload()
    payload.ParseFromString(base64.b64decode(wire))
    return payload


def _whole_trace(records: list[StepRecord], earlier: EarlierSteps | None) -> TracePage:
    return TracePage(step_records=records, start=0, total=len(records), earlier_steps=earlier)
