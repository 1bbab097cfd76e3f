"""How the agent protocols' doors read a request's JSON body (serving/ag_ui.py, and A2A's in
serving/a2a_protocol.py): parsed once, and refused with the reason where it is JSON that Python
cannot read as text. Such a body is the client's to fix, and was taken for the server's own
failure: FastAPI answered "There was an error parsing the body" (a 400, AG-UI's promise being a
422 with the reason), and A2A's SDK an Internal error.

    try:
        parsed = await read_json(request)   # parsed once: the route reads it again for nothing
    except UnreadableBody as refused:
        ...                                 # refused.reason, in the door's own words

Each door answers in its protocol's way: AG-UI a 422 with the reason, as for a body that is not
JSON; A2A a Parse error (-32700) with it."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from ..workflows.payloads import LONE_SURROGATE
from .command_line import bad_byte

NESTED_TOO_DEEP = (
    "the body is nested too deep: arrays and objects within one another, past what the "
    "server's JSON parser reads"
)


class UnreadableBody(ValueError):
    """A body that is JSON, or would be, which cannot be read as text: `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def read_json(request: Request) -> Any:
    """The request's body as JSON, parsed once (Starlette keeps it, for the route's own
    reading). UnreadableBody for a body that is not UTF-8 (naming its first bad byte), nested
    past what Python's parser takes, or with a lone surrogate (\\ud800), which parses but can
    be written nowhere, not even back in an answer; ValueError for one that is not JSON, which
    each door answers in its own words already."""
    try:
        parsed = await request.json()
    except RecursionError:
        raise UnreadableBody(NESTED_TOO_DEEP) from None
    except UnicodeDecodeError as error:
        raise UnreadableBody(f"the body is not UTF-8: {bad_byte(error)}") from None
    try:
        json.dumps(parsed, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise UnreadableBody(LONE_SURROGATE) from None
    except RecursionError:
        raise UnreadableBody(NESTED_TOO_DEEP) from None
    return parsed


class ReadsJsonFirst(APIRoute):
    """A FastAPI route whose body `read_json` reads before FastAPI does: UnreadableBody is a 422
    with the reason, as a body that is not JSON is one."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_first(request: Request) -> Response:
            try:
                await read_json(request)
            except UnreadableBody as refused:
                raise HTTPException(422, refused.reason) from None
            except ValueError:
                pass  # not JSON, or no body: FastAPI's 422 says where
            return await handler(request)

        return read_first
