"""The A2A request handler (`a2a.server.request_handlers.RequestHandler`): each A2A call is calls
of `AgentClient`, and each task is read from Temporal (serving/a2a_tasks.py), so this holds no
state of its own and any serve process answers for any task. The SDK's JSON-RPC dispatcher
parses the requests and writes the answers and errors (serving/a2a_protocol.py mounts it).

- A message is the user's (its role), its ids of at most MAX_ID_CHARS, or it is refused.
- A message without a task starts a conversation (a new context), or, with the `contextId` of
  one, is its next message (`AgentRun.post`): the turn it belongs to is the task.
- A message with a `taskId` answers that task, which must be `input-required`
  (serving/a2a_answers.py).
- `SendMessage` answers once the task ended or waits for input (at once with
  `returnImmediately`: a task this call started is `submitted`, answered without asking its
  run, whose first workflow task may not have run yet); `SendStreamingMessage` and
  `SubscribeToTask` stream its changes to then.
- `CancelTask` cancels the run: it undoes what it did (its compensations), as the HTTP API's
  cancel does, and the task is `canceled`."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, Iterator

from a2a.helpers.proto_helpers import get_text_parts
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from pydantic import ValidationError
from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from ..client.agent_client import AgentClient, AgentInputTooLarge, AgentUpdateNotDelivered
from ..workflows.errors import AgentInputInvalid
from .a2a_answers import answer, data_of
from .a2a_tasks import (
    CONTEXT_PREFIX,
    ENDED,
    NOT_A2A,
    PAUSED,
    a2a_context,
    check_id,
    parse_task_id,
    read_task,
    submitted_task,
    task_id,
)
from .served_agent import ServedAgent
from .streams import Streams, StreamsFull

WAKING_EVENTS = (
    "approval_requested",
    "approval_decided",
    "judge_verdict",
    "plan_submitted",
    "plan_decided",
    "callback_requested",
    "callback_answered",
    "turn_finished",
    "completed",
    "failed",
)
"""The run's events after which a task's state may have changed: it is read again then."""
CANCEL_WAIT_SECONDS = 30.0
"""How long CancelTask waits for the run to undo what it did and end, before it answers the
task as it is then (still working, its cancellation under way)."""


class TemporalTasks(RequestHandler):
    """A2A over the runs of `agents`, each new context a conversation of the `served` agent."""

    def __init__(self, agents: AgentClient, served: ServedAgent, streams: Streams) -> None:
        self.agents = agents
        self.served = served
        self.streams = streams

    async def _read(self, given: str) -> Task:
        structured = self.served.template.get("output_schema") is not None
        return await read_task(self.agents, given, structured=structured)

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        with _refusals():
            return await self._read(params.id)

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        with _refusals():
            _check_sent(params.message)
            context_id = _context_of(params.message)
            with self._held(context_id):
                given = await self._deliver(params.message, context_id)
                if params.configuration.return_immediately:
                    if not (params.message.task_id or params.message.context_id):
                        return submitted_task(given, params.message)  # started: nothing to read
                    return await self._read(given)
                snapshots = [task async for task in self._snapshots(given)]
                return snapshots[-1]

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        with _refusals():
            _check_sent(params.message)
            context_id = _context_of(params.message)
            with self._held(context_id):
                given = await self._deliver(params.message, context_id)
                async for event in self._stream(given):
                    yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        with _refusals(), self._held(parse_task_id(params.id)[0]):
            task = await self._read(params.id)
            if task.status.state in ENDED:
                state = TaskState.Name(task.status.state)
                raise UnsupportedOperationError(f"task {params.id} has ended ({state}): GetTask")
            async for event in self._stream(params.id):
                yield event

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        with _refusals():
            task = await self._read(params.id)
            if task.status.state in ENDED:
                state = TaskState.Name(task.status.state)
                raise TaskNotCancelableError(f"task {params.id} has ended ({state})")
            run = self.agents.run(task.context_id)
            await run.handle.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(run.handle.result(), CANCEL_WAIT_SECONDS)
            return await self._read(params.id)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        raise UnsupportedOperationError("ListTasks: read a task by its id (GetTask)")

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError()

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError()

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError()

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError()

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError()

    @contextlib.contextmanager
    def _held(self, context_id: str) -> Iterator[None]:
        """A place among the server's streams (serving/streams.py bounds them, the HTTP API's
        and these together), for a call that follows a run: StreamsFull past a bound, before
        anything is done."""
        give_back = self.streams.hold(context_id)
        try:
            yield
        finally:
            give_back()

    async def _deliver(self, message: Message, context_id: str) -> str:
        """What the message does (answers a task, continues a context, or starts one as
        `context_id`), done; answers the id of the task it belongs to. Refused, with nothing
        done, as the module docstring says."""
        text = "\n".join(get_text_parts(message.parts)).strip()
        if message.task_id:
            task = await self._read(message.task_id)
            if message.context_id and message.context_id != task.context_id:
                raise InvalidParamsError(f"task {task.id} is of context {task.context_id}")
            if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
                state = TaskState.Name(task.status.state)
                raise InvalidParamsError(f"task {task.id} is {state}: it waits for no answer")
            run = self.agents.run(task.context_id)
            await answer(run, await run.status(), data_of(message.parts))
            return task.id
        if not text:
            raise InvalidParamsError("the message has no text: a new task's message is text")
        if message.context_id:
            if not a2a_context(message.context_id):
                raise InvalidParamsError(f"no context {message.context_id}: {NOT_A2A}")
            run = self.agents.run(message.context_id)
            try:
                await run.handle.describe()
            except RPCError as error:
                if error.status != RPCStatusCode.NOT_FOUND:
                    raise
                raise InvalidParamsError(
                    f"no context {message.context_id}: leave contextId out to start one"
                ) from None
            return task_id(run.id, await run.post(text))
        agent_input = self.served.input(text, conversation=True)
        started = await self.agents.start(agent_input, workflow_id=context_id)
        return task_id(started.id, 1)

    async def _stream(self, given: str) -> AsyncGenerator[Event]:
        """The task, then each change of its status (its answer's artifact before it is
        `completed`), to its end or until it waits for input."""
        first = True
        async for task in self._snapshots(given):
            if first:
                first = False
                yield task
                continue
            if task.status.state == TaskState.TASK_STATE_COMPLETED:
                for artifact in task.artifacts:
                    yield TaskArtifactUpdateEvent(
                        task_id=task.id,
                        context_id=task.context_id,
                        artifact=artifact,
                        last_chunk=True,
                    )
            yield TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )

    async def _snapshots(self, given: str) -> AsyncGenerator[Task]:
        """The task now, then again each time its state changes (read after each of its run's
        WAKING_EVENTS), to its end or until it waits for input."""
        context_id, turn = parse_task_id(given)
        task = await self._read(given)
        yield task
        if task.status.state in PAUSED:
            return
        events = self.agents.run(context_id).events()
        try:
            async for item in events:
                event = item.data
                if event.kind not in WAKING_EVENTS or (event.turn or turn) < turn:
                    continue
                now = await self._read(given)
                if now.status != task.status:
                    task = now
                    yield task
                    if task.status.state in PAUSED:
                        return
        finally:
            await events.aclose()
        now = await self._read(given)
        if now.status != task.status:
            yield now


def _check_sent(message: Message) -> None:
    """InvalidParamsError for a message no client sends: one that is not the user's (an agent's
    message, or one of no role, which the SDK's parser makes of an unknown role, taken as the
    user's would put words in the user's mouth), or with an id over MAX_ID_CHARS."""
    if message.role != Role.ROLE_USER:
        role = Role.Name(message.role) if message.role in Role.values() else str(message.role)
        raise InvalidParamsError(
            f"role: a client's message is the user's (ROLE_USER; \"user\" in A2A 0.3), not {role}"
        )
    for name, given in [
        ("messageId", message.message_id),
        ("contextId", message.context_id),
        ("taskId", message.task_id),
        *[("referenceTaskIds", task) for task in message.reference_task_ids],
    ]:
        check_id(name, given)


def _context_of(message: Message) -> str:
    """The context a message goes to: its task's, the one it names, or a new one."""
    if message.task_id:
        return parse_task_id(message.task_id)[0]
    return message.context_id or f"{CONTEXT_PREFIX}{uuid.uuid4().hex[:16]}"


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The errors of the client and of Temporal, as A2A's: what the run refused and what the
    message got wrong as InvalidParamsError, with the reason; a run that is not there as
    TaskNotFoundError."""
    try:
        yield
    except WorkflowUpdateFailedError as error:
        cause = error.cause
        raise InvalidParamsError(getattr(cause, "message", None) or str(cause)) from None
    except (AgentInputTooLarge, AgentInputInvalid) as error:
        raise InvalidParamsError(error.message) from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidParamsError(f"{where}: {first['msg']}") from None
    except AgentUpdateNotDelivered as error:
        raise InternalError(str(error)) from None
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise TaskNotFoundError(error.message) from None
        raise InternalError(error.message) from None
    except (WorkflowQueryFailedError, StreamsFull) as error:
        raise InternalError(str(error)) from None
