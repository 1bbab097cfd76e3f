"""AG-UI on `durable-agent serve --agent FILE` (docs/agent-protocols.md#ag-ui): `POST /ag-ui`
takes the protocol's `RunAgentInput` and answers with its events over SSE.

A thread is a conversation (AgentInput.conversation), its workflow id `ag-ui-<threadId>`, read
back from Temporal for each input, never from what this server holds, so that any serve
process, restarted or not, carries on a thread. What an input does depends on how it ends:

- a user message: the thread's first starts the conversation with it as the prompt and the
  client's `tools` as callback tools; a later one is the next turn;
- tool messages: the results of the client's tools, answering their calls that wait
  (`answer_callback`);
- `resume` entries: decisions on what waits for a person, the interrupts of the run before.

The run then streams a stretch of the conversation's events, as serving/ag_ui_events.py maps
them, from where the input took effect to the next place the conversation waits for the client.
With `Last-Event-ID`, the input does nothing: the stream resumes after that event. A stretch
that goes on from a wait for the client, or from where one resumes, first reads back the
events before it that AgUiRun recalls: results that still wait for their guardrails. Everything a
client can get wrong is refused before anything is done (an HTTP status and `{"detail": ...}`,
as the HTTP API refuses; the token and the body's size are checked by its door)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Annotated, Any

from ag_ui.core import (
    Context,
    ResumeEntry,
    RunAgentInput,
    TextPart,
    Tool,
    ToolMessage,
    UserMessage,
)
from fastapi import FastAPI, Header, HTTPException
from fastapi.responses import StreamingResponse
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from ..activities.tools import DEFAULT_TOOLS
from ..client.agent_client import AgentClient, AgentRun
from ..workflows import json_schema, run_setup
from ..workflows.agent import AgentWorkflow
from ..workflows.errors import AgentConfigurationError, AgentInputInvalid
from ..workflows.events import AgentEvent
from ..workflows.inputs import AgentInput
from ..workflows.transcript import AssistantMessage
from .ag_ui_events import (
    ARGUMENTS_CUT,
    AgUiRun,
    approval_interrupt_id,
    plan_interrupt_id,
    recalled,
)
from .json_body import ReadsJsonFirst
from .served_agent import ServedAgent
from .streams import Streams, Written, check_resume, event_id

_log = logging.getLogger(__name__)

AG_UI_PATH = "/ag-ui"
WORKFLOW_PREFIX = "ag-ui-"
THREAD_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")
"""A thread id this server takes: a workflow id's part, so no spaces, slashes or controls."""
FIND_SECONDS = 60.0
"""How long the input's effect is looked for in the conversation's events (the event a
message, an answer or a decision makes comes within a workflow task)."""
SCAN_COOLDOWN = timedelta(milliseconds=50)


def add_ag_ui(app: FastAPI, agents: AgentClient, served: ServedAgent, streams: Streams) -> None:
    """`POST /ag-ui` on `app`, over the conversations `agents` runs, of the agent `served`; its
    streams are among `streams`, bounded and ended with the others."""

    async def run_agent(
        body: RunAgentInput, last_event_id: Annotated[str | None, Header()] = None
    ) -> StreamingResponse:
        """Run the served agent on an AG-UI thread; its events as AG-UI's, over SSE."""
        resumed = _resume_point(last_event_id)
        if not THREAD_ID.match(body.thread_id):
            raise HTTPException(
                422, "threadId: 1 to 200 letters, digits and . _ : @ - (a workflow id's part)"
            )
        run = agents.run(WORKFLOW_PREFIX + body.thread_id)
        give_back = streams.hold(run.id)  # 429 past a bound, before any work
        try:
            if resumed is not None:
                if await _described(run) is None:
                    raise HTTPException(404, f"no thread {body.thread_id}")
                start, text = resumed
                await check_resume(run, start, last_event_id or "")  # 416 past its last event
            else:
                start, text = await _take(body, run, agents, served), None
            # A stretch that goes on from a wait for the client (or from where one resumes)
            # may follow calls whose results still wait for their guardrails (read back only
            # where the agent has them: the read goes over the conversation from its start).
            goes_on = served.checks_tool_results and bool(
                resumed is not None or body.resume or _trailing_tool_results(body.messages)
            )
            earlier = await _checks_before(run, start) if goes_on else []
        except BaseException:
            give_back()
            raise
        shown = AgUiRun(body.thread_id, body.run_id, body.run_id, resumed_text=text)
        for event in earlier:
            shown.recall(event)
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return streams.held(give_back, _stream(streams, run, shown, start), headers)

    # The body read first: one that is not UTF-8, or nested past the parser, is a 422 with the
    # reason (FastAPI's was a 400, "There was an error parsing the body"), and so is one with a
    # lone surrogate (\ud800), which parses but writes nowhere: not into the run's input (a 500
    # as it started), nor an event that echoes the input (a runId broke the stream at
    # RUN_STARTED, its run started).
    app.router.add_api_route(
        AG_UI_PATH,
        run_agent,
        methods=["POST"],
        response_class=StreamingResponse,
        tags=["AG-UI"],
        route_class_override=ReadsJsonFirst,
    )


def _resume_point(last_event_id: str | None) -> tuple[int, tuple[int, int, int] | None] | None:
    """Where a resumed run starts (Last-Event-ID, an id AgUiRun.position made): the offset of
    its first event, and the text message the client has begun (step, attempt, characters)."""
    if last_event_id is None:
        return None
    read = [event_id(part) for part in last_event_id.split(":")]
    numbers = [number for number in read if number is not None]
    if len(numbers) != len(read) or len(numbers) not in (1, 4) or -1 in numbers[1:]:
        raise HTTPException(
            422, "Last-Event-ID: the id of the last event the client got, in ASCII digits"
        )
    text = (numbers[1], numbers[2], numbers[3]) if len(numbers) == 4 else None
    return numbers[0] + 1, text


async def _stream(
    streams: Streams, run: AgentRun, shown: AgUiRun, start: int
) -> AsyncIterator[str]:
    yield shown.started(start - 1)
    try:
        async for item in streams.follow(run, start):
            if isinstance(item, Written):
                chunk = shown.delta(item)
            else:
                at, event = item
                if (
                    event.kind == "tool_call_started"
                    and len(event.arguments or "") >= ARGUMENTS_CUT
                ):
                    whole = await _whole_arguments(run, event)
                    event = event.model_copy(update={"arguments": whole})
                chunk = shown.event(at, event)
            if chunk:
                yield chunk
            if shown.finished:
                return
    except Exception:
        # The protocol's end for the client, which may resume from the last id it got.
        _log.exception("AG-UI: following %s failed", run.id)
        yield shown.error("serve could not follow the conversation: resume", "serve_error")
        return
    if not streams.stopping:
        yield shown.ended_without_end()


async def _take(
    body: RunAgentInput, run: AgentRun, agents: AgentClient, served: ServedAgent
) -> int:
    """Do what the input asks of the thread; the offset of the conversation's first event the
    run shows. HTTPException for an input that cannot be taken, before anything is done."""
    described = await _described(run)
    if body.resume:
        if described is None:
            raise HTTPException(404, f"no thread {body.thread_id}: nothing waits to be resumed")
        _running(described, body.thread_id)
        return await _decide(run, body.resume)
    results = _trailing_tool_results(body.messages)
    if results:
        if described is None:
            raise HTTPException(404, f"no thread {body.thread_id}: no tool call waits")
        _running(described, body.thread_id)
        return await _answer(run, results)
    text = _message_text(body)
    if described is None:
        agent_input = _first_input(served, text, body.tools or [])
        await agents.start(agent_input, workflow_id=run.id)
        return 0
    _running(described, body.thread_id)
    status = await run.status()
    talk = status.conversation
    if talk is None or talk.ended:
        raise HTTPException(409, f"thread {body.thread_id}'s conversation has ended")
    if talk.working or status.pending_callbacks or status.approvals or status.plan:
        raise HTTPException(
            409,
            f"thread {body.thread_id} is not waiting for a message: answer what it waits for"
            " (its tool calls, its interrupts) first",
        )
    turn = await run.post(text)
    offset, _ = await _find(run, lambda e: e.kind == "turn_started" and e.turn == turn)
    return offset


def _first_input(served: ServedAgent, text: str, tools: list[Tool]) -> AgentInput:
    """The conversation's input: the served agent's, with the client's tools as callback tools
    beside its own. 422 for a tool a run would refuse, checked here by the run's rules: its
    schema (without fetching anything: a `$schema` or `$ref` outside it is refused), and its
    name, which no other tool of the run may have (run_setup.check_callback_names)."""
    declared = list(served.template.get("callback_tools", []))
    for tool in tools:
        parameters = tool.parameters if tool.parameters is not None else {"type": "object"}
        if not isinstance(parameters, dict):
            raise HTTPException(422, f"tools: {tool.name}: parameters must be a JSON schema")
        try:
            json_schema.check(parameters)
        except json_schema.SchemaRefused as refused:
            raise HTTPException(422, f"tools: {tool.name}: parameters {refused}") from None
        declared.append(
            {"name": tool.name, "description": tool.description, "parameters": parameters}
        )
    try:
        agent_input = served.input(text, conversation=True, callback_tools=declared)
    except AgentInputInvalid as error:
        raise HTTPException(422, error.message) from None
    try:
        run_setup.check_callback_names(_worker_tools(served), agent_input)
    except AgentConfigurationError as error:
        raise HTTPException(422, f"tools: {error.message}") from None
    return agent_input


def _worker_tools(served: ServedAgent) -> list[str]:
    """The worker's tools a run of `served` is offered, as far as serve knows: those its file
    names; where it names none (all of the worker's), this process's, as a worker here offers
    them (all of them when serve runs the worker)."""
    named = served.template.get("tools")
    if named is not None:
        return list(named)
    return [spec.name for spec in DEFAULT_TOOLS.for_run(None).tools]


def _message_text(body: RunAgentInput) -> str:
    """The last message, a user's, as text, with the input's context after it."""
    last = body.messages[-1] if body.messages else None
    if not isinstance(last, UserMessage):
        raise HTTPException(
            422, "messages: the last is a user's message, a tool's result, or send resume entries"
        )
    content = last.content
    if isinstance(content, str):
        text = content
    else:
        text = "\n".join(part.text for part in content if isinstance(part, TextPart))
    if not text.strip():
        raise HTTPException(422, "messages: the user's message has no text")
    return text + _context(body.context or [])


def _context(context: list[Context]) -> str:
    if not context:
        return ""
    lines = "\n".join(f"- {item.description}: {item.value}" for item in context)
    return f"\n\nContext from the application:\n{lines}"


def _trailing_tool_results(messages: list[Any]) -> list[ToolMessage]:
    """The tool messages after the last message of another role: the results the client
    computed since the run before."""
    trailing: list[ToolMessage] = []
    for message in reversed(messages):
        if not isinstance(message, ToolMessage):
            break
        trailing.insert(0, message)
    return trailing


async def _answer(run: AgentRun, results: list[ToolMessage]) -> int:
    """Answer each waiting call a result names; the offset after the last call's request."""
    waiting = {call.call_id for call in await run.pending_callbacks()}
    answering = [message for message in results if message.tool_call_id in waiting]
    if not answering:
        raise HTTPException(
            409, "no tool call of this thread waits for these results (answered or timed out)"
        )
    answers = [(message.tool_call_id, _result(message)) for message in answering]
    for call_id, result in answers:
        await run.answer_callback(call_id, result)
    ids = {message.tool_call_id for message in answering}
    last = answering[-1].tool_call_id
    _, asked = await _find(
        run,
        _is("callback_answered", last),
        lambda event: event.kind == "callback_requested" and event.call_id in ids,
    )
    return asked + 1


def _result(message: ToolMessage) -> Any:
    """A tool message's content, as JSON where it is JSON (a callback tool's result may have a
    schema), else as text; 422 for JSON nested past what Python reads."""
    content = message.content
    if not isinstance(content, str):
        content = "\n".join(part.text for part in content if isinstance(part, TextPart))
    if message.error:
        return {"error": message.error, "content": content}
    try:
        # NaN, Infinity and 1e400 are no JSON (RFC 8259): Python reads them as floats, which
        # reached the run as null. They are text here.
        return json.loads(content, parse_constant=_not_json, parse_float=_finite)
    except ValueError:
        return content
    except RecursionError:
        raise HTTPException(
            422, f"messages: tool {message.tool_call_id[:100]}: its JSON is nested too deeply"
        ) from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number[:20]} is past what a JSON number carries")
    return value


async def _decide(run: AgentRun, entries: list[ResumeEntry]) -> int:
    """Decide what each entry answers; the offset after the last one's request. Every entry is
    read before any is sent: one the client got wrong (422) decides nothing."""
    if not entries:
        raise HTTPException(422, "resume: no entries")
    answers = [(_interrupted_call(entry), *_decision(entry)) for entry in entries]
    decided: list[tuple[Callable[[AgentEvent], bool], Callable[[AgentEvent], bool]]] = []
    for call_id, approve, reason in answers:
        if call_id is None:
            if approve:
                await run.approve_plan(reason)
            else:
                await run.reject_plan(reason or "rejected")
            decided.append((_is("plan_decided"), _is("plan_submitted")))
        else:
            await run.decide_tool_call(call_id, approve, reason)
            decided.append((_is("approval_decided", call_id), _is("approval_requested", call_id)))
    until, asked_event = decided[-1]
    _, asked = await _find(run, until, asked_event)
    return asked + 1


def _interrupted_call(entry: ResumeEntry) -> str | None:
    """The call an entry's interrupt waits on; None for the plan's. 422 for another id."""
    if entry.interrupt_id == plan_interrupt_id():
        return None
    prefix = approval_interrupt_id("")
    if not entry.interrupt_id.startswith(prefix):
        raise HTTPException(422, f"resume: no interrupt {entry.interrupt_id[:100]!r}")
    return entry.interrupt_id[len(prefix) :]


def _is(kind: str, call_id: str | None = None) -> Callable[[AgentEvent], bool]:
    return lambda event: event.kind == kind and call_id in (None, event.call_id)


def _decision(entry: ResumeEntry) -> tuple[bool, str | None]:
    if entry.status == "cancelled":
        return False, "cancelled by the client"
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approve"), bool):
        raise HTTPException(
            422, f"resume: {entry.interrupt_id[:100]}: payload is {{approve: bool, reason?}}"
        )
    reason = payload.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise HTTPException(422, f"resume: {entry.interrupt_id[:100]}: reason is a string")
    return payload["approve"], reason


async def _find(
    run: AgentRun,
    until: Callable[[AgentEvent], bool],
    wanted: Callable[[AgentEvent], bool] | None = None,
) -> tuple[int, int]:
    """Read the conversation's events from the first to the one `until` matches: its offset,
    and that of the last one `wanted` matched before it (-1: none)."""
    found = -1
    events = run.events(0, poll_cooldown=SCAN_COOLDOWN)
    try:
        async with asyncio.timeout(FIND_SECONDS):
            async for item in events:
                if wanted is not None and wanted(item.data):
                    found = item.offset
                if until(item.data):
                    return item.offset, found
    except TimeoutError:
        raise HTTPException(504, "the conversation did not take the input in time") from None
    finally:
        await events.aclose()
    raise HTTPException(409, "the conversation ended before it took the input")


async def _checks_before(run: AgentRun, start: int) -> list[AgentEvent]:
    """The conversation's events before `start` that AgUiRun.recall reads (`recalled`): the
    ends of calls whose results its tool-result guardrails check, their verdicts, and the
    client's answers."""
    if start <= 0:
        return []
    kept: list[AgentEvent] = []
    events = run.events(0, poll_cooldown=SCAN_COOLDOWN)
    try:
        async with asyncio.timeout(FIND_SECONDS):
            async for item in events:
                if item.offset >= start:
                    break
                if recalled(item.data):
                    kept.append(item.data)
                if item.offset == start - 1:
                    break
    except TimeoutError:
        raise HTTPException(504, "the conversation's events could not be read in time") from None
    finally:
        await events.aclose()
    return kept


def _running(described: WorkflowExecutionDescription, thread_id: str) -> None:
    if described.status != WorkflowExecutionStatus.RUNNING:
        raise HTTPException(409, f"thread {thread_id}'s conversation has ended")


async def _described(run: AgentRun) -> WorkflowExecutionDescription | None:
    """The thread's conversation, or None when it has none; 409 when its id is a workflow of
    another kind (whose queries would wait 30 s for no answer, and its updates without end)."""
    try:
        described = await run.handle.describe()
    except RPCError as error:
        if error.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if described.workflow_type != AgentWorkflow.__name__:
        raise HTTPException(409, f"{run.id} is a workflow of another kind, not a conversation")
    return described


async def _whole_arguments(run: AgentRun, event: AgentEvent) -> str:
    """A call's arguments whole, from the transcript (the event's are cut), else as cut."""
    with contextlib.suppress(RPCError):
        total = (await run.transcript_page(0, 1)).total
        page = await run.transcript_page(max(total - 4, 0))
        for message in reversed(page.messages):
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    if call.id == event.call_id:
                        return call.arguments
    return event.arguments or "{}"
