"""How a client's message answers an A2A task that is `input-required` (serving/a2a_tasks.py
says, in the task's status message, which of these it waits for): a data part that approves or
rejects the waiting plan or tool calls, or gives a callback tool's result. Each is the call the
HTTP API's decision and callback routes make (serving/http_api.py); the run's own refusals come
back as the client's InvalidParamsError, and nothing else is sent."""

from __future__ import annotations

from typing import Any

from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from ..client.agent_client import AgentRun
from ..workflows.status import RunStatus
from .a2a_tasks import waiting_for_a_person

APPROVAL_KEYS = {"approve", "reason", "call_id"}
CALLBACK_KEYS = {"call_id", "result"}


def data_of(parts: Any) -> dict[str, Any] | None:
    """The first data part of a message, as JSON, if it has one that is an object."""
    for part in parts:
        if part.HasField("data"):
            data = MessageToDict(part.data)
            if not isinstance(data, dict):
                raise InvalidParamsError("the answer's data part is a JSON object")
            return data
    return None


async def answer(run: AgentRun, status: RunStatus, given: dict[str, Any] | None) -> None:
    """Apply the client's answer `given` to what the run waits for (`status`)."""
    if given is None:
        raise InvalidParamsError(
            "this task waits for an answer: a data part, as its status message says"
        )
    plan = status.plan
    if plan is not None and plan.status == "awaiting_approval":
        approve, reason = _decision(given, allow_call_id=False)
        if approve:
            await run.approve_plan(reason, version=plan.version)
        elif not reason:
            raise InvalidParamsError("rejecting a plan needs a reason, for the model")
        else:
            await run.reject_plan(reason, version=plan.version)
        return
    waiting = [a.call_id for a in waiting_for_a_person(status)]
    if waiting:
        approve, reason = _decision(given, allow_call_id=True)
        chosen = given.get("call_id")
        if chosen is not None and chosen not in waiting:
            raise InvalidParamsError(f"call_id {chosen!r} does not wait: {', '.join(waiting)} do")
        for call_id in [chosen] if chosen is not None else waiting:
            await run.decide_tool_call(call_id, approve, reason)
        return
    if status.pending_callbacks:
        if set(given) != CALLBACK_KEYS or not isinstance(given["call_id"], str):
            raise InvalidParamsError('a callback\'s answer is {"call_id": "...", "result": ...}')
        await run.answer_callback(given["call_id"], given["result"])
        return
    raise InvalidParamsError("the task waits for nothing now: read it again")


def _decision(given: dict[str, Any], *, allow_call_id: bool) -> tuple[bool, str | None]:
    keys = APPROVAL_KEYS if allow_call_id else APPROVAL_KEYS - {"call_id"}
    approve, reason = given.get("approve"), given.get("reason")
    if not set(given) <= keys or not isinstance(approve, bool):
        allowed = ", ".join(sorted(keys))
        raise InvalidParamsError(f'a decision is {{"approve": true|false}}, with only {allowed}')
    if reason is not None and not isinstance(reason, str):
        raise InvalidParamsError("reason: a text")
    return approve, reason
