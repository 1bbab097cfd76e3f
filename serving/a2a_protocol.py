"""A2A (Agent2Agent, protocol 1.0) on `durable-agent serve --agent FILE`
(docs/agent-protocols.md#a2a): the Agent Card at the protocol's well-known path, and the JSON-RPC
endpoint, whose requests the official SDK (`a2a-sdk`) parses and answers, each by a call of
serving/a2a_handler.py over the runs.

    add_a2a(app, agents, served)   # on the HTTP API's app (serving/http_api.py)

The card is public, as the console's page is: it carries no data, and says how to authenticate
(the API's bearer token, which every JSON-RPC call needs: the API's door refuses a call without
it with 401, before its body is read). The endpoint refuses, before the SDK's dispatcher reads
it, a body that is not JSON text (serving/json_body.py), and a 0.3 request whose params the
SDK's 0.3 layer would answer in pydantic's words or take for its own failure."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from a2a.compat.v0_3 import conversions, types as types_v03
from a2a.server.jsonrpc_models import InvalidParamsError, InvalidRequestError, JSONParseError
from a2a.server.request_handlers.response_helpers import (
    agent_card_to_dict,
    build_error_response,
)
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from google.protobuf.json_format import ParseDict
from pydantic import BaseModel, ValidationError
from starlette.routing import Route

from ..activities.tools import registered_tools
from ..client.agent_client import AgentClient
from ..workflows.outcomes import bounded
from ..workflows.payloads import named_problems
from .a2a_handler import TemporalTasks
from .json_body import UnreadableBody, read_json
from .served_agent import ServedAgent
from .streams import Streams

CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
RPC_PATH = "/a2a"
SCHEME = "bearer"
MODES = ["text/plain", "application/json"]


def add_a2a(app: FastAPI, agents: AgentClient, served: ServedAgent, streams: Streams) -> None:
    """The card at CARD_PATH and the JSON-RPC endpoint at RPC_PATH, over `agents`' runs of
    `served`; a call that follows a run takes a place among `streams`, as an event stream
    does."""
    card = agent_card(served)

    @app.get(CARD_PATH, include_in_schema=False)
    def card_route(request: Request) -> JSONResponse:
        # The endpoint's URL as this request reached the server (its host, behind a proxy too).
        here = AgentCard()
        here.CopyFrom(card)
        url = str(request.base_url).rstrip("/") + RPC_PATH
        here.supported_interfaces[0].url = url
        return JSONResponse(agent_card_to_dict(here))

    dispatcher = JsonRpcDispatcher(TemporalTasks(agents, served, streams), enable_v0_3_compat=True)

    async def rpc_route(request: Request) -> Response:
        # JSON that Python cannot read as text is the client's Parse error: the dispatcher took
        # each kind for its own failure (-32603, or a 500 for a lone surrogate in the `id`),
        # and a run would fail on it. Parsed once: the dispatcher reads it again for nothing.
        try:
            parsed = await read_json(request)
        except UnreadableBody as refused:
            return JSONResponse(build_error_response(None, JSONParseError(message=refused.reason)))
        except ValueError:
            parsed = None  # not JSON: the dispatcher says where
        refused_in_0_3 = _refused_in_0_3(parsed)
        if refused_in_0_3 is not None:
            return JSONResponse(refused_in_0_3)
        return await dispatcher.handle_requests(request)

    app.router.routes.append(Route(RPC_PATH, rpc_route, methods=["POST"]))
    for name in SDK_LOGGERS:
        logging.getLogger(name).addFilter(_CLIENT_ERRORS_UNLOGGED)


class _ClientErrorsUnlogged(logging.Filter):
    """The SDK logs every request it refuses: a warning each, and a traceback for params or a
    request it cannot parse. Those are the client's mistakes, answered with the reason; in
    serve's log they would be noise any client could make (serve's own errors, an unhandled
    exception or an Internal error, are ERROR and stay)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR and record.msg not in CLIENT_ERROR_LOGS


_CLIENT_ERRORS_UNLOGGED = _ClientErrorsUnlogged()
SDK_LOGGERS = (
    "a2a.server.routes.jsonrpc_dispatcher",
    "a2a.compat.v0_3.jsonrpc_adapter",
    "a2a.utils.version_validator",
)
CLIENT_ERROR_LOGS = frozenset(
    {
        "Failed to validate base JSON-RPC request",
        "Failed to parse request params",
        "Failed to validate base JSON-RPC request for v0.3",
    }
)
"""What the SDK logs, with a traceback, as it answers a request it cannot parse."""


V0_3_REQUESTS: dict[str, tuple[type[BaseModel], Callable[[Any], Any]]] = {
    "message/send": (types_v03.SendMessageRequest, conversions.to_core_send_message_request),
    "message/stream": (
        types_v03.SendStreamingMessageRequest,
        conversions.to_core_send_message_request,
    ),
    "tasks/get": (types_v03.GetTaskRequest, conversions.to_core_get_task_request),
    "tasks/cancel": (types_v03.CancelTaskRequest, conversions.to_core_cancel_task_request),
    "tasks/resubscribe": (
        types_v03.TaskResubscriptionRequest,
        conversions.to_core_subscribe_to_task_request,
    ),
}
"""The 0.3 requests this server answers: the SDK's 0.3 model of each, and how its 0.3 layer reads
it as 1.0's for the handler (`JSONRPC03Adapter.METHOD_TO_MODEL`, `RequestHandler03`). The
push-notification methods and the extended card are refused whatever their params."""
INT32 = range(-(2**31), 2**31)
"""What a 1.0 request's `historyLength` holds (an int32)."""


def _refused_in_0_3(parsed: Any) -> dict[str, Any] | None:
    """The answer to a 0.3 request whose params the SDK's 0.3 layer would answer in pydantic's
    words, or take for its own failure; None for any other request, the dispatcher's to answer.

    Params its 0.3 models refuse were Invalid Request, with pydantic's text and a link for each
    problem: now Invalid params (Invalid Request for the request's own fields), each problem as
    its field and rule. Params that do not read as 1.0's (a `historyLength` past an int32, a
    file's bytes that are no base64) were an Internal error: now Invalid params, saying why."""
    if not isinstance(parsed, dict) or parsed.get("method") not in V0_3_REQUESTS:
        return None
    given = parsed.get("id")
    request_id = given if isinstance(given, str | int) and not isinstance(given, bool) else None
    model, read_as_1_0 = V0_3_REQUESTS[parsed["method"]]
    try:
        request = model.model_validate(parsed)
    except ValidationError as error:
        problems = named_problems(error)
        if all(problem["loc"][:1] == ("params",) for problem in error.errors()):
            return build_error_response(request_id, InvalidParamsError(message=problems))
        return build_error_response(request_id, InvalidRequestError(message=problems))
    params = getattr(request, "params", None)
    configuration = getattr(params, "configuration", None)
    history_length = getattr(
        params if configuration is None else configuration, "history_length", None
    )
    if history_length is not None and history_length not in INT32:
        said = f"params: historyLength is at most {INT32[-1]:,} (an int32, as A2A 1.0 has it)"
        return build_error_response(request_id, InvalidParamsError(message=said))
    try:
        read_as_1_0(request)
    except Exception as error:  # a conversion of data: whatever it fails on is the data's
        said = f"params: not what A2A 1.0 takes, as serve reads the request: {error}"
        return build_error_response(request_id, InvalidParamsError(message=bounded(said)))
    return None


def agent_card(served: ServedAgent) -> AgentCard:
    """What the card says of `served`: its name, its tools as skills (the client's callback
    tools' own descriptions included), streaming but no push notifications, and the bearer
    token; the interface's URL is each request's."""
    template = served.template
    card = AgentCard(
        name=served.name,
        # Not the system prompt: the card is public, and an operator's prompt may not be.
        description=f"{served.name}: an agent served by durable-agent, each task a durable run",
        version="1.0",
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
    )
    card.supported_interfaces.append(
        AgentInterface(
            url=RPC_PATH, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0
        )
    )
    bearer = HTTPAuthSecurityScheme(
        scheme="Bearer",
        description="the API's token ($AGENT_API_TOKEN): Authorization: Bearer <token>",
    )
    card.security_schemes[SCHEME].CopyFrom(SecurityScheme(http_auth_security_scheme=bearer))
    requirement = SecurityRequirement()
    requirement.schemes[SCHEME].CopyFrom(StringList())
    card.security_requirements.append(requirement)
    card.skills.extend(_skills(template))
    if served.card:  # the operator's own words, over serve's (served_agent.CARD_FIELDS)
        if "skills" in served.card:
            del card.skills[:]
        ParseDict(served.card, card)
    return card


def _skills(template: dict[str, Any]) -> list[AgentSkill]:
    skills = []
    known = registered_tools()  # this process's: all of them when serve runs the worker
    for name in template.get("tools") or []:
        description = known[name].spec.description if name in known else f"the {name} tool"
        skills.append(AgentSkill(id=name, name=name, description=description[:1000], tags=["tool"]))
    for tool in template.get("callback_tools") or []:
        skills.append(
            AgentSkill(
                id=tool["name"],
                name=tool["name"],
                description=tool["description"][:1000],
                tags=["callback"],
            )
        )
    if not skills:
        skills.append(
            AgentSkill(id="chat", name="chat", description="Answers a message.", tags=["chat"])
        )
    return skills
