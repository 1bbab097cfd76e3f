"""The HTTP API: JSON and Server-Sent Events over `AgentClient`, for product teams whose front
end is not Python (`durable-agent serve`, docs/http-api.md). It adds no rule of its own: each
route is one call of the client, and the workflow's own refusals come back as 409 with its
reason.

    app = http_api.create_app(agents, token="...")   # a FastAPI app; uvicorn serves it

Every route needs `Authorization: Bearer <token>` (compared in constant time; 401 otherwise),
the OpenAPI document included, but the console's page and its files. The token is checked before
any of a request's body is read, and a body is never read past MAX_BODY_BYTES (`_Door`). A run's
events stream as SSE, each with its offset as `id:`;
a client that reconnects with `Last-Event-ID` gets every later event once, also after the run
ended, and the stream ends with an event named `done` carrying the result or the error
(serving/streams.py)."""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError, PydanticSerializationError, to_json
from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ..client import overview
from ..client.agent_client import (
    AgentClient,
    AgentInputTooLarge,
    AgentRun,
    AgentUpdateNotDelivered,
)
from ..workflows.agent import AgentWorkflow
from ..workflows.bounds import MAX_COUNT
from ..workflows.decisions import AutoModeChange, PendingCallback, PlanState, ToolApproval
from ..workflows.errors import AgentConfigurationError, AgentInputInvalid
from ..workflows.input_limits import TOO_LARGE
from ..workflows.inputs import AgentInput
from ..workflows.paging import TracePage, TranscriptPage
from ..workflows.payloads import LONE_SURROGATE, lone_surrogate
from ..workflows.reporting import guardrail_lines, verdict_line
from ..workflows.status import AGENT_STATUS, RunStatus
from .a2a_protocol import CARD_PATH, add_a2a
from .ag_ui import add_ag_ui
from .console import add_console
from .json_body import ReadsJsonFirst
from .served_agent import ServedAgent
from .streams import ResumedPastTheEnd, Streams, StreamsFull, check_resume, event_id

API_TOKEN_VARIABLE = "AGENT_API_TOKEN"
MIN_TOKEN_CHARS = 16
LIST_LIMIT = 50
MAX_WAITING_ASKED = 100
"""The waiting runs one listing asks for what they wait on (a query each); the runs past it are
listed with their status alone."""
LIST_SHARED_SECONDS = 2.0
"""How long a listing of the runs is given to every caller that asks for as many: the console
reads it every 3 s a tab, and each listing queries each waiting run."""
MAX_BODY_BYTES = 4_000_000
"""A request body over this is refused (413), and never read past it: a run's input may have
1,800,000 bytes of JSON (workflows/input_limits.py), with room for how a client writes it."""
RUNS_QUERY = "WorkflowType='AgentWorkflow'"
PUBLIC_PATHS = ("/console/", "/runs/", CARD_PATH)
"""Besides `/`, what a request may GET without the token: the console's page and its files,
which hold no data (serving/console.py), and A2A's Agent Card, which says how to authenticate."""
DIGITS = re.compile(r"[0-9]+")


def _digits_alone(given: Any) -> Any:
    # pydantic, as int(), reads "+3", "3_0", " 5", "5\n" and "3.0" as numbers.
    if isinstance(given, str) and not DIGITS.fullmatch(given):
        raise PydanticCustomError("int_parsing", "Input should be a whole number: ASCII digits")
    return given


Digits = BeforeValidator(_digits_alone)
"""A query's number: ASCII digits alone, then within its bounds (`Query(ge=..., le=...)`)."""


@dataclass(frozen=True)
class Token:
    """The API's token: $AGENT_API_TOKEN, or one made for this server (`made`)."""

    value: str
    made: bool

    def announcement(self, console: str) -> list[str]:
        """What the server says of it once, as it starts, with the link to the `console` (its
        URL): a made token in full (nobody else knows it) and a link that carries it, ready to
        open; a given one only by its variable."""
        if self.made:
            return [
                f"token (printed once; set {API_TOKEN_VARIABLE} to choose one): {self.value}",
                f"console: {console}#token={self.value}",
            ]
        return [
            f"token: ${API_TOKEN_VARIABLE}",
            f"console: {console}#token=<${API_TOKEN_VARIABLE}>",
        ]


def api_token(environ: Mapping[str, str] = os.environ) -> Token:
    """$AGENT_API_TOKEN, else a new random one. AgentConfigurationError for a given token too
    short to guard anything."""
    given = environ.get(API_TOKEN_VARIABLE, "").strip()
    if not given:
        return Token(secrets.token_urlsafe(32), made=True)
    if len(given) < MIN_TOKEN_CHARS:
        raise AgentConfigurationError(
            f"{API_TOKEN_VARIABLE} has {len(given)} characters: give at least {MIN_TOKEN_CHARS}"
        )
    return Token(given, made=False)


class StartRun(AgentInput):
    """The contract's workflow input (`durable-agent contract`), and the run's id if the caller
    chooses it."""

    workflow_id: str | None = Field(default=None, min_length=1, max_length=400)


class Started(BaseModel):
    workflow_id: str


class RunListed(BaseModel):
    """A run: `status` is its AgentStatus search attribute; `waiting` what it waits on, for a
    run that waits for a person (its plan, its tool calls), or why that could not be read."""

    workflow_id: str
    status: str | None
    waiting: dict[str, Any] | None = None


class Message(BaseModel):
    text: str = Field(min_length=1)


class Decision(BaseModel):
    """A person's decision: on the plan that waits (`kind: plan`, approve or reject with a
    reason, `version` to decide only that one) or on a tool call (`kind: tool_call`, `call_id`;
    `remember` decides the tool's later calls too). Its booleans are JSON's true and false
    only, as A2A's and AG-UI's are: pydantic would read "yes", 1 or "on" as an approval."""

    model_config = ConfigDict(strict=True)

    kind: Literal["plan", "tool_call"]
    approve: bool
    reason: str | None = None
    call_id: str | None = None
    version: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    remember: bool = False


class Turn(BaseModel):
    turn: int


class ShownStatus(RunStatus):
    """The run's `status` query, and what auto mode's judge said of each waiting call it handed
    to a person, by call id: the line the CLI and the Web UI show (reporting.verdict_line), which
    the console shows as it is rather than say it again."""

    verdict_lines: dict[str, str] = Field(default_factory=dict)
    guardrail_lines: list[str] = Field(default_factory=list)
    """What the run's guardrails did, as lines (reporting.guardrail_lines): each that tripped,
    and the passes counted."""


class Answer(BaseModel):
    """A callback tool's result, computed by the client (docs/tools.md#callback-tools)."""

    call_id: str = Field(min_length=1)
    result: Any = None


def create_app(
    agents: AgentClient,
    *,
    token: str,
    streams: Streams | None = None,
    served: ServedAgent | None = None,
) -> FastAPI:
    """The API over `agents`, guarded by `token`; its event streams are in `streams` (for a
    server that ends them as it stops). With `served`, the agent protocols offer that agent
    (docs/agent-protocols.md)."""
    streams = Streams() if streams is None else streams
    if not token:
        raise ValueError("the API needs a token")
    listings = _SharedListings(agents)

    def authorized(authorization: Annotated[str | None, Header()] = None) -> None:
        # `_Door` refused the request already, before its body; this puts the header in the
        # OpenAPI document.
        if not _token_matches(authorization, token):
            raise HTTPException(401, UNAUTHORIZED, {"WWW-Authenticate": "Bearer"})

    app = FastAPI(
        title="durable-agent",
        summary="Start, follow, steer and decide agent runs.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    api = APIRouter(prefix="/api", dependencies=[Depends(authorized)], route_class=ReadsJsonFirst)

    @app.get("/openapi.json", dependencies=[Depends(authorized)], include_in_schema=False)
    def openapi() -> dict[str, Any]:
        return app.openapi()

    @app.exception_handler(RequestValidationError)
    async def unprocessable(request: Request, error: RequestValidationError) -> Response:
        # FastAPI's own answer, but for the value each problem quotes: a NaN or an Infinity
        # is no JSON number, and the 422 that quoted one failed as it was written, a 500. A
        # body's are refused as it is read now (`ReadsJsonFirst`); this stays for any other.
        detail = {"detail": jsonable_encoder(error.errors())}
        content = to_json(detail, inf_nan_mode="strings")
        return Response(content, status_code=422, media_type="application/json")

    @app.exception_handler(RPCError)
    async def server_refused(request: Request, error: RPCError) -> JSONResponse:
        if error.status == RPCStatusCode.NOT_FOUND and "already completed" in error.message:
            # An update sent to a run that has ended: Temporal's NOT_FOUND, but the run is there.
            return JSONResponse({"detail": "the run has ended"}, status_code=409)
        if error.status == RPCStatusCode.NOT_FOUND:
            return JSONResponse({"detail": "no such run"}, status_code=404)
        if error.status == RPCStatusCode.ALREADY_EXISTS:
            return JSONResponse({"detail": error.message}, status_code=409)
        return JSONResponse({"detail": error.message}, status_code=502)

    @app.exception_handler(WorkflowAlreadyStartedError)
    async def taken(request: Request, error: WorkflowAlreadyStartedError) -> JSONResponse:
        return JSONResponse({"detail": f"a run {error.workflow_id} exists already"}, 409)

    @app.exception_handler(WorkflowQueryFailedError)
    async def query_failed(request: Request, error: WorkflowQueryFailedError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.exception_handler(WorkflowUpdateFailedError)
    async def refused(request: Request, error: WorkflowUpdateFailedError) -> JSONResponse:
        cause = error.cause
        reason = getattr(cause, "message", None) or str(cause)
        kind = getattr(cause, "type", None)
        # Over a bound (a message, a comment, an update's input) is 413, as a run's input is.
        return JSONResponse({"detail": reason, "type": kind}, 413 if kind == TOO_LARGE else 409)

    @app.exception_handler(AgentUpdateNotDelivered)
    async def busy(request: Request, error: AgentUpdateNotDelivered) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=503)

    @app.exception_handler(AgentInputTooLarge)
    async def too_large(request: Request, error: AgentInputTooLarge) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=413)

    @app.exception_handler(AgentInputInvalid)
    async def invalid(request: Request, error: AgentInputInvalid) -> JSONResponse:
        return JSONResponse({"detail": error.message, "type": error.type}, status_code=422)

    @app.exception_handler(UnicodeEncodeError)
    @app.exception_handler(PydanticSerializationError)
    async def not_text(request: Request, error: ValueError) -> JSONResponse:
        # JSON's "\ud800" is a str no payload can carry: a message, a reason or a result sent
        # with one failed as it was sent to the run, a 500.
        if not lone_surrogate(error):
            raise error
        return JSONResponse({"detail": LONE_SURROGATE}, status_code=422)

    @app.exception_handler(StreamsFull)
    async def full(request: Request, error: StreamsFull) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=429)

    @app.exception_handler(ResumedPastTheEnd)
    async def past_the_end(request: Request, error: ResumedPastTheEnd) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=416)

    async def agent_run(workflow_id: str) -> AgentRun:
        """The run `workflow_id`, once the server says it is an agent's: 404 for an empty id, an
        unknown one, or a workflow of another kind in the namespace. A query of another kind's
        workflow waited 30 s for a 502, an update waited on with no end, and `cancel` cancelled
        it, whatever it was."""
        if not workflow_id:  # `/api/runs//events`: Temporal's "WorkflowId is not set", a 502
            raise HTTPException(404, "no such run: the route names none")
        run = agents.run(workflow_id)
        if (await run.handle.describe()).workflow_type != AgentWorkflow.__name__:
            raise HTTPException(404, "no such run: that workflow is not an agent's run")
        return run

    @api.post("/runs", status_code=201)
    async def start(body: StartRun) -> Started:
        """Start a run or a conversation; answers its id."""
        agent_input = AgentInput.model_validate(body.model_dump(exclude={"workflow_id"}))
        started = await agents.start(agent_input, workflow_id=body.workflow_id)
        return Started(workflow_id=started.id)

    @api.get("/runs")
    async def runs(
        limit: Annotated[int, Query(ge=1, le=1000), Digits] = LIST_LIMIT,
    ) -> list[RunListed]:
        """The runs that wait for a person first, each with what it waits on (the newest
        MAX_WAITING_ASKED at most), then the newest others (at most `limit` in all). A listing
        made in the last LIST_SHARED_SECONDS is shared."""
        return await listings.get(limit)

    @api.get("/runs/{workflow_id:path}/transcript")
    async def transcript(
        workflow_id: str,
        start: Annotated[int, Query(ge=0, le=MAX_COUNT), Digits] = 0,
        max_bytes: Annotated[int, Query(ge=1, le=1_000_000), Digits] = 1_000_000,
    ) -> TranscriptPage:
        """The transcript, a page at a time."""
        return await (await agent_run(workflow_id)).transcript_page(start, max_bytes)

    @api.get("/runs/{workflow_id:path}/trace")
    async def trace(
        workflow_id: str,
        start: Annotated[int, Query(ge=0, le=MAX_COUNT), Digits] = 0,
        max_bytes: Annotated[int, Query(ge=1, le=1_000_000), Digits] = 1_000_000,
    ) -> TracePage:
        """The step records, a page at a time."""
        return await (await agent_run(workflow_id)).trace_page(start, max_bytes)

    @api.post("/runs/{workflow_id:path}/messages")
    async def message(workflow_id: str, body: Message) -> Turn:
        """A message to a conversation: it starts the next turn or steers the working one."""
        return Turn(turn=await (await agent_run(workflow_id)).post(body.text))

    @api.post("/runs/{workflow_id:path}/decisions")
    async def decide(workflow_id: str, body: Decision) -> PlanState | ToolApproval:
        """Approve or reject what waits for a person; 409 with the run's reason when it
        refuses (decided already, another version, an unknown call)."""
        run = await agent_run(workflow_id)
        if body.kind == "plan":
            if body.approve:
                return await run.approve_plan(body.reason, version=body.version)
            if not body.reason:
                raise HTTPException(422, "reason: rejecting a plan needs one, for the model")
            return await run.reject_plan(body.reason, version=body.version)
        if not body.call_id:
            raise HTTPException(422, "call_id: a decision on a tool call names the call")
        return await run.decide_tool_call(
            body.call_id, body.approve, body.reason, remember=body.remember
        )

    @api.post("/runs/{workflow_id:path}/callbacks")
    async def answer_callback(workflow_id: str, body: Answer) -> PendingCallback:
        """Answer a callback tool's call that waits (the status's `pending_callbacks`); 409
        with the run's reason when the result does not match the tool's result schema or the
        call does not wait."""
        run = await agent_run(workflow_id)
        return await run.answer_callback(body.call_id, body.result)

    @api.post("/runs/{workflow_id:path}/auto-mode")
    async def auto_mode(workflow_id: str, body: AutoModeChange) -> dict[str, str]:
        """For an operator: turn auto mode's judge off for the rest of the run, or replace its
        rules; 409 when the run has no auto mode to change."""
        run = await agent_run(workflow_id)
        return {"auto_mode": await run.set_auto_mode(body)}

    @api.post("/runs/{workflow_id:path}/interrupt")
    async def interrupt(workflow_id: str) -> Turn:
        """Stop a conversation's working turn."""
        return Turn(turn=await (await agent_run(workflow_id)).interrupt())

    @api.post("/runs/{workflow_id:path}/cancel", status_code=202)
    async def cancel(workflow_id: str) -> dict[str, str]:
        """Ask the run to stop: it fails as cancelled, undoing what it changed."""
        await (await agent_run(workflow_id)).handle.cancel()
        return {"workflow_id": workflow_id, "status": "cancelling"}

    @api.get("/runs/{workflow_id:path}/events", response_class=StreamingResponse)
    async def events(
        workflow_id: str, last_event_id: Annotated[str | None, Header()] = None
    ) -> StreamingResponse:
        """The run's events as Server-Sent Events, from the one after `Last-Event-ID`."""
        offset = 0
        if last_event_id is not None:
            last = event_id(last_event_id)
            if last is None:
                raise HTTPException(
                    422, f"Last-Event-ID: an event's id, ASCII digits alone, 0 to {MAX_COUNT}"
                )
            offset = last + 1
        give_back = streams.hold(workflow_id)  # 429 past a bound, before any work
        try:
            run = await agent_run(workflow_id)  # 404 now, rather than an endless stream
            if last_event_id is not None:
                await check_resume(run, offset, last_event_id)  # 416, likewise
        except BaseException:
            give_back()
            raise
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return streams.response(run, offset, give_back, headers)

    # Last: a run's id may hold a slash (a sub-agent's does), and this path would match the
    # others' too.
    @api.get("/runs/{workflow_id:path}")
    async def status(workflow_id: str) -> ShownStatus:
        """The run's `status` query: its step, cost, limits, plan and pending decisions, and the
        judge's verdict on each waiting call it judged, as a line (`verdict_lines`)."""
        status = await (await agent_run(workflow_id)).status()
        waiting = [*status.approvals, *status.sub_agent_approvals]
        said = {call.call_id: verdict_line(call.verdict) for call in waiting if call.verdict}
        guarded = guardrail_lines(status.step_records)
        return ShownStatus(**dict(status), verdict_lines=said, guardrail_lines=guarded)

    app.include_router(api)
    if served is not None:
        add_a2a(app, agents, served, streams)
        add_ag_ui(app, agents, served, streams)
    app.add_middleware(_Door, token=token, limit=MAX_BODY_BYTES)
    add_console(app)  # its headers go on every answer, the door's refusals too
    return app


UNAUTHORIZED = "Authorization: Bearer <token> is needed"


def _token_matches(authorization: str | None, token: str) -> bool:
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode())


class _SharedListings:
    """`GET /api/runs`, made once for every caller that asks for as many runs while it is made
    or within LIST_SHARED_SECONDS of its end: N console tabs cost one listing, not N."""

    def __init__(self, agents: AgentClient) -> None:
        self._agents = agents
        self._made: dict[int, asyncio.Task[list[RunListed]]] = {}
        self._ended: dict[int, float] = {}

    async def get(self, limit: int) -> list[RunListed]:
        now = asyncio.get_running_loop().time()
        for count, task in list(self._made.items()):
            if not task.done():
                continue
            failed = task.cancelled() or task.exception() is not None
            if failed or now - self._ended.get(count, now) > LIST_SHARED_SECONDS:
                del self._made[count]
        if limit not in self._made:
            self._made[limit] = asyncio.create_task(self._list_and_time(limit))
        # Shielded: a caller that leaves does not cancel the listing the others wait for.
        return await asyncio.shield(self._made[limit])

    async def _list_and_time(self, limit: int) -> list[RunListed]:
        try:
            return await self._list(limit)
        finally:
            self._ended[limit] = asyncio.get_running_loop().time()

    async def _list(self, limit: int) -> list[RunListed]:
        waiting = await overview.waiting_runs(self._agents, min(limit, MAX_WAITING_ASKED))
        listed = [
            RunListed(
                workflow_id=run.workflow_id,
                status="awaiting_approval",
                waiting=run.as_json(),
            )
            for run in waiting
        ][:limit]
        seen = {run.workflow_id for run in listed}
        async for execution in self._agents.client.list_workflows(RUNS_QUERY, limit=limit):
            if len(listed) >= limit:
                break
            if execution.id in seen:
                continue
            seen.add(execution.id)
            status = execution.typed_search_attributes.get(AGENT_STATUS)
            listed.append(RunListed(workflow_id=execution.id, status=status))
        return listed


class _BodyTooLarge(HTTPException):
    """Raised from `receive` when a body's bytes pass the limit; FastAPI passes an HTTPException
    raised while it reads a body on as it is, and answers it."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body has more than {limit:,} bytes", {"Connection": "close"})


class _Door:
    """What a request meets before any of its body is read, in this order:

    - the token, for every route but the console's page and files (401): FastAPI reads and
      parses a route's body before it runs the route's dependencies, so a request without the
      token was read whole (an unauthenticated 150 MB body grew the server by 300 MB);
    - the body's framing: Content-Length with Transfer-Encoding is refused (400: RFC 9112 6.1,
      the pattern of request smuggling; the parser would go by Transfer-Encoding and read a
      chunked body of any size past a small declared length), and a body without a declared
      length (411);
    - a declared length over `limit` (413).

    Then the body's bytes are counted as they arrive, whatever the headers said: past `limit`
    the request is refused (413) and its connection closed, with nothing more read.

    A request refused before its body keeps its connection (but for the pair of headers): the
    server reads what is left of the body and drops it, as it comes, without keeping it, so
    that a client that sends its whole body before it reads the answer gets the answer (a
    closed connection with unread bytes is reset, and the answer can be lost with it)."""

    def __init__(self, app: Any, token: str, limit: int) -> None:
        self.app, self.token, self.limit = app, token, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        refusal = self._refusal(scope)
        if refusal is not None:
            return await refusal(scope, receive, send)
        answered = False

        async def sending(message: Any) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, self._counted(receive), sending)
        except _BodyTooLarge as refused:
            # FastAPI answers it; a reader of the body that is not FastAPI's may not.
            if answered:
                raise
            detail = {"detail": refused.detail}
            await JSONResponse(detail, 413, refused.headers)(scope, receive, send)

    def _refusal(self, scope: Any) -> JSONResponse | None:
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.lower(), []).append(value)
        lengths = headers.get(b"content-length", [])
        chunked = b"transfer-encoding" in headers
        # Where a request's body ends is in doubt: the connection is closed rather than read
        # on to the next request (RFC 9112 6.1: a server MUST close it).
        smuggling = chunked and bool(lengths)
        close = {"Connection": "close"} if smuggling else {}
        authorization = next(iter(headers.get(b"authorization", [])), b"").decode("latin-1")
        if not _public(scope) and not _token_matches(authorization, self.token):
            return JSONResponse(
                {"detail": UNAUTHORIZED}, 401, {"WWW-Authenticate": "Bearer", **close}
            )
        if smuggling:
            detail = "Content-Length and Transfer-Encoding together: send one"
            return JSONResponse({"detail": detail}, 400, close)
        if chunked:
            return JSONResponse({"detail": "send the body with a Content-Length"}, 411)
        if lengths and lengths[0].isdigit() and int(lengths[0]) > self.limit:
            detail = f"the body has {int(lengths[0]):,} bytes: at most {self.limit:,}"
            return JSONResponse({"detail": detail}, 413)
        return None

    def _counted(self, receive: Any) -> Any:
        read = 0

        async def counted() -> Any:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > self.limit:
                    raise _BodyTooLarge(self.limit)
            return message

        return counted


def _public(scope: Any) -> bool:
    path = scope["path"]
    console = path == "/" or path.startswith(PUBLIC_PATHS)
    return console and scope["method"] in ("GET", "HEAD")
