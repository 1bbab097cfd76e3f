"""A2A's tasks, read from Temporal (docs/agent-protocols.md#a2a): serve keeps no task of its own,
so every answer about a task is what its run says now, and a task outlives the serve process
that started it.

A context is a conversation run (its workflow id); a task is one turn of it: `<workflow id>#<turn>`.
The turn's state is the task's: working, waiting for a person or a client (`input-required`),
answered (`completed`, the answer as an artifact), or ended with the run (`failed` with its reason,
`canceled` when the run was cancelled, or when the turn was interrupted).

    task = await read_task(agents, "a2a-5f0c2a9e1b7d4c36#2")   # a2a.types.Task"""

from __future__ import annotations

import contextlib
import json
import re
from datetime import timedelta
from typing import Any

from a2a.helpers.proto_helpers import get_text_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import Artifact, Message, Role, Task, TaskState, TaskStatus
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ..client.agent_client import AgentClient, AgentRun, AgentRunFailed
from ..workflows.agent import AgentWorkflow
from ..workflows.decisions import ToolApproval
from ..workflows.state import TurnRecord
from ..workflows.status import RunStatus
from ..workflows.sub_agents import MAX_WORKFLOW_ID_CHARS

TURN_MARK = "#"
"""Between a task id's conversation and its turn."""
TURN = re.compile(r"[0-9]{1,18}")
"""A task id's turn, as a number int() reads."""
CONTEXT_PREFIX = "a2a-"
"""The workflow ids of the conversations A2A starts."""
NOT_A2A = f"an A2A context is a conversation A2A started (its id begins {CONTEXT_PREFIX})"
MAX_ID_CHARS = MAX_WORKFLOW_ID_CHARS
"""The longest id a client may send: a message's, a context's, a task's (a context is a workflow
id, which Temporal bounds so). A longer one names nothing, and a refusal that quoted it (of 3 MB,
under serve's body bound) sent it back whole."""
CLOSED_QUERY_SECONDS = 10.0
"""How long a query of an ended conversation (for its turns) may take: a worker replays it."""

ENDED = (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED)
"""Terminal states: such a task takes no more messages, and has nothing left to stream."""
PAUSED = (*ENDED, TaskState.TASK_STATE_INPUT_REQUIRED)
"""Where a message's call answers and a stream stops: the task ended, or waits for the client."""

HOW_TO_ANSWER = {
    "plan": 'send a message with this task id and a data part {"approve": true} or'
    ' {"approve": false, "reason": "..."}',
    "tool_calls": 'send a message with this task id and a data part {"approve": true} or'
    ' {"approve": false, "reason": "..."}; add "call_id" to decide one call only',
    "callbacks": 'send a message with this task id and a data part {"call_id": "...",'
    ' "result": ...}, the result of the tool the call names',
}
"""What an input-required task's status message says the client sends (serving/a2a_answers.py
reads it)."""


def task_id(context_id: str, turn: int) -> str:
    return f"{context_id}{TURN_MARK}{turn}"


def check_id(name: str, given: str) -> None:
    """InvalidParamsError for an id the client sent (`name`: "messageId") over MAX_ID_CHARS."""
    if len(given) > MAX_ID_CHARS:
        raise InvalidParamsError(
            f"{name}: {len(given):,} characters; an id has at most {MAX_ID_CHARS:,} (a context "
            "is a workflow id, which Temporal bounds so)"
        )


def parse_task_id(given: str) -> tuple[str, int]:
    """The conversation and turn of a task id; TaskNotFoundError for an id that names none,
    InvalidParamsError for one longer than any id (check_id)."""
    check_id("the task id", given)
    context_id, mark, turn = given.rpartition(TURN_MARK)
    # ASCII digits, and few of them: int() refuses other digits ("²") and 4,300 of them.
    if not mark or not context_id or not TURN.fullmatch(turn) or int(turn) < 1:
        raise TaskNotFoundError(f"no task {given!r}: a task id is <contextId>#<turn>")
    if not a2a_context(context_id):
        raise TaskNotFoundError(f"no task {given!r}: {NOT_A2A}")
    return context_id, int(turn)


def a2a_context(context_id: str) -> bool:
    """A context A2A started: an A2A client reads and steers only those, never a conversation
    that an app, the HTTP API or AG-UI started in the same namespace."""
    return context_id.startswith(CONTEXT_PREFIX)


async def read_task(agents: AgentClient, given: str, *, structured: bool = False) -> Task:
    """The task `given` as its run says it is now; `structured`: its runs have an output schema,
    so an answer is JSON, also given as data. TaskNotFoundError for a run that does not exist, is
    not a conversation, or has no such turn (kept)."""
    context_id, turn = parse_task_id(given)
    run = agents.run(context_id)
    try:
        description = await run.handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            raise TaskNotFoundError(f"no task {given!r}") from None
        raise
    if description.workflow_type != AgentWorkflow.__name__:
        raise TaskNotFoundError(f"no task {given!r}: {context_id} is not an agent's run")
    running = description.status == WorkflowExecutionStatus.RUNNING
    status = await _status(run, running)
    if status is None or status.conversation is None:
        raise TaskNotFoundError(f"no task {given!r}: {context_id} is not a conversation")
    record = next((t for t in status.conversation.turns if t.turn == turn), None)
    task = Task(id=given, context_id=context_id)
    talk = status.conversation
    queued = [m.text for m in talk.queued if m.turn == turn]
    if record is None and running and (queued or (turn == 1 and not talk.turns)):
        # A turn about to begin: its message waits for it (or the run's first turn, its prompt).
        for text in queued:
            task.history.append(_message(Role.ROLE_USER, task, [new_text_part(text)]))
        task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_WORKING))
        return task
    if record is None:
        raise TaskNotFoundError(f"no task {given!r}: the conversation has no turn {turn} (kept)")
    task.history.append(_message(Role.ROLE_USER, task, [new_text_part(record.message)]))
    if record.outcome == "answered":
        _completed(task, record, structured)
    elif record.outcome != "working" or not running:
        await _ended(task, record, run, description.status)
    else:
        _working(task, status)
    return task


def submitted_task(given: str, message: Message) -> Task:
    """The task a message has just started (a new context's first turn), as `submitted`: the
    state A2A gives a task received and not yet at work, which is all that is known of it
    before its run's first workflow task."""
    context_id, _ = parse_task_id(given)
    task = Task(id=given, context_id=context_id)
    text = "\n".join(get_text_parts(message.parts)).strip()
    task.history.append(_message(Role.ROLE_USER, task, [new_text_part(text)]))
    task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))
    return task


async def _status(run: AgentRun, running: bool) -> RunStatus | None:
    rpc_timeout = None if running else timedelta(seconds=CLOSED_QUERY_SECONDS)
    try:
        return await run.handle.query(AgentWorkflow.status, rpc_timeout=rpc_timeout)
    except RPCError:
        if running:
            raise
        return None


def _completed(task: Task, record: TurnRecord, structured: bool) -> None:
    task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_COMPLETED))
    artifact = Artifact(artifact_id=f"{task.id}/answer", name="answer")
    answer = record.answer or ""
    artifact.parts.append(new_text_part(answer))
    if structured:
        # The finish call's arguments, checked against the schema (builtin_tools.finish_answer).
        with contextlib.suppress(ValueError):
            artifact.parts.append(new_data_part(json.loads(answer)))
    task.artifacts.append(artifact)


async def _ended(
    task: Task, record: TurnRecord, run: AgentRun, closed: WorkflowExecutionStatus | None
) -> None:
    """A turn that ended without an answer, or whose run ended while it worked."""
    if record.outcome == "interrupted" or closed == WorkflowExecutionStatus.CANCELED:
        state, reason = (
            TaskState.TASK_STATE_CANCELED,
            "the run was cancelled; what it did is undone",
        )
        if record.outcome == "interrupted":
            reason = "the turn was interrupted"
    elif record.outcome in ("step_limit", "refused"):
        state, reason = TaskState.TASK_STATE_FAILED, f"the turn ended: {record.outcome}"
    elif closed == WorkflowExecutionStatus.FAILED:
        state = TaskState.TASK_STATE_FAILED
        try:
            await run.result()
            reason = "the run failed"
        except AgentRunFailed as failure:
            reason = f"{failure.type}: {failure.message}"
    else:
        state = TaskState.TASK_STATE_FAILED
        reason = f"the run ended ({closed.name.lower() if closed else 'gone'}) before its answer"
    message = _message(Role.ROLE_AGENT, task, [new_text_part(reason)])
    task.status.CopyFrom(TaskStatus(state=state, message=message))


def waiting_for_a_person(status: RunStatus) -> list[ToolApproval]:
    """The run's own calls that wait for a person: not those auto mode's judge reviews, which
    it may yet decide (a verdict that escalates one wakes the task's readers)."""
    return [a for a in status.approvals if a.status == "awaiting_approval" and not a.judging]


def _working(task: Task, status: RunStatus) -> None:
    waiting: dict[str, Any] | None = None
    shown: list[dict[str, Any]]
    if status.plan is not None and status.plan.status == "awaiting_approval":
        plan = status.plan
        waiting = {"waiting": "plan", "version": plan.version, "steps": plan.steps}
        said = "The agent's plan waits for approval:\n" + "\n".join(plan.steps)
    elif calls := waiting_for_a_person(status):
        # The arguments whole, as data; as a person is shown them where they are too long.
        shown = [
            {"call_id": c.call_id, "tool": c.tool, "arguments": c.parsed_arguments or c.arguments}
            for c in calls
        ]
        waiting = {"waiting": "tool_calls", "calls": shown}
        said = "Tool calls wait for approval: " + ", ".join(
            f"{c.tool} ({c.call_id})" for c in calls
        )
    elif status.pending_callbacks:
        shown = [
            {"call_id": c.call_id, "tool": c.tool, "arguments": c.arguments}
            for c in status.pending_callbacks
        ]
        waiting = {"waiting": "callbacks", "calls": shown}
        said = "Callback tools' calls wait for their results: " + ", ".join(
            f"{c.tool} ({c.call_id})" for c in status.pending_callbacks
        )
    if waiting is None:
        task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_WORKING))
        return
    how = HOW_TO_ANSWER[waiting["waiting"]]
    waiting["answer"] = how
    parts = [new_text_part(f"{said}\nTo answer, {how}."), new_data_part(waiting)]
    message = _message(Role.ROLE_AGENT, task, parts)
    task.status.CopyFrom(TaskStatus(state=TaskState.TASK_STATE_INPUT_REQUIRED, message=message))


def _message(role: Role, task: Task, parts: list[Any]) -> Message:
    side = "user" if role == Role.ROLE_USER else "agent"
    message = Message(
        message_id=f"{task.id}/{side}", role=role, task_id=task.id, context_id=task.context_id
    )
    message.parts.extend(parts)
    return message
