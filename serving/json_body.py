"""How every door reads a request's JSON body (the HTTP API's routes and AG-UI's, and A2A's in
serving/a2a_protocol.py): parsed once, as JSON (RFC 8259), and refused with the reason where it
is JSON that Python cannot read as text. Such a body is the client's to fix, and was taken for
the server's own failure: FastAPI answered "There was an error parsing the body" (a 400, where
the docs promise a 422 with the reason), and A2A's SDK an Internal error. Python's parser also
reads NaN, Infinity and 1e400 as floats, which reached a run as null (a callback's result, a
schema's default): each is refused too, naming where it is.

    try:
        parsed = await read_json(request)   # parsed once: the route reads it again for nothing
    except UnreadableBody as refused:
        ...                                 # refused.reason, in the door's own words

Each door answers in its protocol's way: AG-UI a 422 with the reason, as for a body that is not
JSON; A2A a Parse error (-32700) with it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from ..workflows.payloads import LONE_SURROGATE, non_json_number
from .command_line import bad_byte

SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
"""How a surrogate reaches a parsed body: JSON's `\ud800` escape (UTF-8 cannot carry one raw).
Only a body with one is written out again to find a lone one; a pair is fine."""
NESTED_TOO_DEEP = (
    "the body is nested too deep: arrays and objects within one another, past what the "
    "server's JSON parser reads"
)


class UnreadableBody(ValueError):
    """A body that is JSON, or would be, which cannot be read as text: `reason` says why. For a
    number JSON has not, `number` is its text and `loc` where it is in the body."""

    def __init__(self, reason: str, number: str = "", loc: list[str | int] | None = None) -> None:
        super().__init__(reason)
        self.reason, self.number, self.loc = reason, number, loc


async def read_json(request: Request) -> Any:
    """The request's body as JSON, parsed once (Starlette keeps it, for the route's own
    reading). UnreadableBody for a body that is not UTF-8 (naming its first bad byte), nested
    past what Python's parser takes, with a number JSON has not (NaN, Infinity, 1e400), or with
    a lone surrogate (\\ud800), which parses but can be written nowhere, not even back in an
    answer; ValueError for one that is not JSON, which each door answers in its own words."""
    if hasattr(request, "_json"):
        return request._json
    refused: list[str] = []

    def number(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            refused.append(text)
        return value

    body = await request.body()
    try:
        parsed = json.loads(body, parse_constant=number, parse_float=number)
    except RecursionError:
        raise UnreadableBody(NESTED_TOO_DEEP) from None
    except UnicodeDecodeError as error:
        raise UnreadableBody(f"the body is not UTF-8: {bad_byte(error)}") from None
    if refused:
        text = refused[0][:40]
        why = "past what a JSON number carries" if text[-1].isdigit() else "not a JSON number"
        where = non_json_number(parsed) or []  # none: a later key replaced it
        raise UnreadableBody(f"not JSON: {text} is {why}", text, where)
    if SURROGATE_ESCAPE.search(body):
        try:
            json.dumps(parsed, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise UnreadableBody(LONE_SURROGATE) from None
        except RecursionError:
            raise UnreadableBody(NESTED_TOO_DEEP) from None
    request._json = parsed  # what Request.json() answers from now on
    return parsed


class ReadsJsonFirst(APIRoute):
    """A FastAPI route whose body `read_json` reads before FastAPI does: UnreadableBody is a 422
    with the reason, as a body that is not JSON is one; for a number JSON has not, in the shape
    of pydantic's problems, naming where it is."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def read_first(request: Request) -> Response:
            try:
                await read_json(request)
            except UnreadableBody as refused:
                if refused.loc is None:
                    raise HTTPException(422, refused.reason) from None
                problem = {"type": "json_invalid", "loc": ["body", *refused.loc]}
                detail = [{**problem, "msg": refused.reason, "input": refused.number}]
                raise HTTPException(422, detail) from None
            except ValueError:
                pass  # not JSON, or no body: FastAPI's 422 says where
            return await handler(request)

        return read_first
