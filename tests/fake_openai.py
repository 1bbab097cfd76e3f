"""A scripted, local stand-in for OpenAI's Chat Completions endpoint.

    with FakeOpenAI([Reply(tool_calls=[("call_a", "add", '{"a": 1}')]), Reply("done")]) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        ...
        assert fake.remaining == 0 and fake.requests[0].body["messages"][0]["role"] == "system"

Each accepted request takes the next scripted entry: a `Reply` (an assistant message) or an
`HttpReply` (any status, JSON body and headers, sent as is; `error()` builds the API's error
shape). Like the real API, and without using the script, it answers 401 to a wrong key and 400
to a transcript that breaks the tool-call pairing rule. An exhausted script answers 500.

Faults a network brings are scripted too: `Hangup()` resets the connection without an answer,
`Slow(seconds, entry)` answers only after a delay, and `HttpReply(raw=...)` sends any bytes.

The Responses API (POST /v1/responses) is served too, statelessly, as with `store=false`: a
`ResponsesReply` answers with reasoning items (their `encrypted_content` sealed by the fake, and
sent only when the request's `include` asks for it), text (with the `phase` newer models label it
with) and function calls. Like the real API it answers 400 to a reasoning item sent back without
its encrypted content ("Item with id 'rs_...' not found. Items are not persisted when 'store' is
set to false..."), with its content changed, or without the item it preceded; to a
`function_call` without its `function_call_output` (and the reverse); and to a
`previous_response_id`, since it keeps nothing. An assistant message sent back without the
`phase` the fake gave it is no 400 at the real API, which only reads the turn worse: the fake
notes it in `phases_dropped` for the test to see.

`RecordedReply(body)` answers with a body recorded from the real API (tests/recorded/), sent as
it was (as events when the request streams); the fake takes its reasoning items back as the API
would, by their encrypted content as it was sent.

With `"stream": true` a Chat Completions reply comes as chunks of deltas (usage last, when
`stream_options.include_usage`), and a Responses reply as the API's server-sent events
(response.created, each item's added, deltas and done events, response.completed), text,
summaries and arguments in `chunk_chars` pieces; `pause_after=N` waits for the fake's
`stream_hold` after N events and `hangup_after=N` resets the connection there.

For many runs at once, a `responder` answers each request from its body instead of the script,
and `max_in_flight=N` makes the fake a provider that serves N requests at once: one more gets
OpenAI's 429 with a `retry-after` (`refusal_headers`), and `in_flight`, `peak_in_flight` and
`refused` count them at the fake. `latency_seconds` delays every reply served, and `hold` (a
threading.Event) keeps the requests it serves in flight until it is set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = ("/v1/chat/completions", "/chat/completions")
RESPONSES_PATHS = ("/v1/responses", "/responses")
_SECRET = b"fake-openai-reasoning-key"
NOT_PERSISTED = (
    "Item with id '{id}' not found. Items are not persisted when 'store' is set to false. Try "
    "again with 'store' set to true, or remove this item from your input."
)
"""The API's 400 for a reasoning item sent back without its encrypted content (issue 19)."""


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(id, name, arguments as raw text) per call."""
    tool_calls_json: list[dict[str, Any]] | None = None
    """Raw tool call objects, sent instead of those built from `tool_calls` (one without an
    id, say)."""
    finish_reason: str | None = None
    """Defaults to "tool_calls" when there are calls, else "stop"."""
    prompt_tokens: int | None = None
    """Defaults to an estimate from the request's size."""
    completion_tokens: int | None = None
    cached_tokens: int = 0
    cache_write_tokens: int | None = None
    """prompt_tokens_details.cache_write_tokens, which GPT-5.6 and later report; None leaves it
    out, as the models before them do."""
    reasoning_tokens: int = 0
    """completion_tokens_details.reasoning_tokens."""
    model: str | None = None
    """Defaults to the requested model."""


@dataclass
class RecordedReply:
    """A body recorded from the real API, sent as it was (see tests/recorded/)."""

    body: dict[str, Any]


@dataclass
class ResponsesReply:
    """One Responses API reply: by default its reasoning item, then its text, then its calls."""

    text: str | None = None
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(call_id, name, arguments as raw text) per function call."""
    phase: str | None = None
    """The text's message item's `phase` ("commentary", "final_answer"); None leaves it out."""
    reasoning: str | None = None
    """The summary of a reasoning item before everything else."""
    items: list[tuple[str, Any]] | None = None
    """The output in any order instead: ("reasoning", summary), ("text", text) or ("call",
    (call_id, name, arguments))."""
    input_tokens: int | None = None
    """Defaults to an estimate from the request's size."""
    cached_tokens: int = 0
    cache_write_tokens: int | None = 0
    """None leaves it out of input_tokens_details, as models before GPT-5.6 did."""
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    """Defaults to an estimate from the reasoning summaries (the real ones think longer)."""
    status: str = "completed"
    incomplete_reason: str | None = None
    model: str | None = None
    chunk_chars: int = 8
    """Streamed: the size of each delta."""
    pause_after: int | None = None
    """Streamed: wait for the fake's `stream_hold` after this many events."""
    hangup_after: int | None = None
    """Streamed: reset the connection after this many events."""


def seal(item_id: str, summary: Any) -> str:
    """The fake's encrypted_content of a reasoning item: any change to it, or to the item's id
    or summary, breaks it."""
    plain = item_id + json.dumps(summary, sort_keys=True)
    digest = hmac.new(_SECRET, plain.encode(), hashlib.sha256).digest()
    return "gAAAA" + base64.b64encode(digest).decode()


def responses_error(
    body: dict[str, Any], served: Mapping[str, dict[str, Any]] | None = None
) -> HttpReply | None:
    """The Responses API's 400 for a stateless request it refuses; None when it is valid.
    `served`: reasoning items of recorded bodies by id, which carry the real API's encrypted
    content rather than the fake's seal."""
    if body.get("previous_response_id"):
        return error(
            400,
            f"Previous response with id '{body['previous_response_id']}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    items = body.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list) or not items:
        return error(400, "Missing required parameter: 'input'.", param="input")
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "reasoning":
            item_id = str(item.get("id"))
            encrypted = item.get("encrypted_content")
            if not encrypted:
                return error(400, NOT_PERSISTED.format(id=item_id), param="input")
            recorded = (served or {}).get(item_id)
            if recorded is not None:
                intact = encrypted == recorded.get("encrypted_content") and item.get(
                    "summary"
                ) == recorded.get("summary")
            else:
                intact = hmac.compare_digest(encrypted, seal(item_id, item.get("summary")))
            if not intact:
                return error(
                    400,
                    f"The encrypted content for item {item_id} could not be verified.",
                    param="input",
                    code="invalid_encrypted_content",
                )
            following = items[index + 1] if index + 1 < len(items) else {}
            if (
                following.get("type") not in ("function_call", "reasoning")
                and following.get("role") != "assistant"
            ):
                return error(
                    400,
                    f"Item '{item_id}' of type 'reasoning' was provided without its required "
                    "following item.",
                    param="input",
                )
        elif kind == "function_call":
            calls.setdefault(str(item.get("call_id")), index)
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                return error(
                    400,
                    f"No tool call found for function call output with call_id {call_id}.",
                    param="input",
                )
            answered.add(call_id)
    for call_id in calls:
        if call_id not in answered:
            return error(400, f"No tool output found for function call {call_id}.", param="input")
    return None


def message_text(item: dict[str, Any]) -> str | None:
    """The text of an assistant message input item (its content as a string, or its text parts
    joined); None for any other item."""
    if item.get("role") != "assistant" or item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content or () if isinstance(part, dict))


def phases_dropped(body: dict[str, Any], phases: Mapping[str, str]) -> list[str]:
    """The texts of the assistant messages `body` sends back without the `phase` they were
    served with (`phases`: a served message item's text, and its phase). The API takes such a
    request, and reads the turn worse ("dropping it can degrade performance")."""
    items = body.get("input")
    dropped = []
    for item in items if isinstance(items, list) else ():
        text = message_text(item) if isinstance(item, dict) else None
        if text is not None and text in phases and item.get("phase") != phases[text]:
            dropped.append(text)
    return dropped


@dataclass
class HttpReply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    """How long the fake waits before answering; a client that gave up meanwhile gets nothing."""
    raw: bytes | None = None
    """Sent instead of `body` encoded as JSON: a body JSON cannot encode, or not JSON at all."""
    served: bool = False
    """Set by the fake on a reply it serves: counted in `in_flight` until it is sent."""
    events: list[tuple[str, Any]] | None = None
    """Sent instead of `body` as server-sent events (name, data)."""
    pause_after: int | None = None
    hangup_after: int | None = None


@dataclass
class Hangup:
    """Read the request, then reset the connection without answering (a dropped link)."""


@dataclass
class Slow:
    """Answer with `then`, but only after `seconds`: slower than the client's timeout, say."""

    seconds: float
    then: Reply | ResponsesReply | RecordedReply | HttpReply


def error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> HttpReply:
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return HttpReply(status, body, dict(headers or {}))


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    raw: bytes
    body: Any
    at: float = 0.0
    """time.monotonic() when the request arrived."""
    refused: bool = False
    """Answered 429 by `max_in_flight`."""


def tool_choice_error(body: dict[str, Any], *, responses: bool) -> HttpReply | None:
    """The API's 400 for a `tool_choice` without `tools`, or one that forces a function that is
    not offered; None when it keeps the rules."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    if not body.get("tools"):
        return error(
            400,
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            param="tool_choice",
        )
    if isinstance(choice, dict):
        name = choice.get("name") if responses else (choice.get("function") or {}).get("name")
        offered = [
            tool.get("name") if responses else (tool.get("function") or {}).get("name")
            for tool in body["tools"]
        ]
        if name not in offered:
            return error(
                400,
                f"Invalid value for 'tool_choice': function '{name}' is not one of 'tools'.",
                param="tool_choice",
            )
    return None


def pairing_error(messages: list[dict[str, Any]]) -> HttpReply | None:
    """The API's 400 when tool messages do not answer each call of the assistant message
    before them, exactly once and before any other message; None when the pairing holds."""
    waiting: list[str] = []  # ids of the last assistant message's calls still unanswered
    asked_at = 0
    for index, message in enumerate([*messages, {"role": "end"}]):
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in waiting:
                return error(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'.",
                    param=f"messages.[{index}].role",
                )
            waiting.remove(message["tool_call_id"])
            continue
        if waiting:
            return error(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                "response messages: " + ", ".join(waiting),
                param=f"messages.[{asked_at}].role",
            )
        waiting = [call["id"] for call in message.get("tool_calls") or ()]
        asked_at = index
    return None


RATE_LIMIT_HEADERS = {"retry-after-ms": "1000", "retry-after": "1"}
"""What OpenAI sends with a 429: the delay in milliseconds, and in whole seconds."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    """Room for a hundred clients connecting at once (the default, 5, drops SYNs beyond it and
    the clients retry a second later)."""


class FakeOpenAI:
    def __init__(
        self,
        script: list[Reply | ResponsesReply | RecordedReply | HttpReply | Hangup | Slow]
        | None = None,
        *,
        api_key: str = "sk-test-fake",
        responder: Callable[[dict[str, Any]], Reply | HttpReply] | None = None,
        max_in_flight: int | None = None,
        refusal_headers: dict[str, str] | None = None,
        latency_seconds: float = 0.0,
        hold: threading.Event | None = None,
    ) -> None:
        self.script = list(script or [])
        self.api_key = api_key
        self.responder = responder
        """Answers each request from its body (then the script is not used)."""
        self.max_in_flight = max_in_flight
        self.refusal_headers = dict(
            RATE_LIMIT_HEADERS if refusal_headers is None else refusal_headers
        )
        self.latency_seconds = latency_seconds
        self.hold = hold
        self.requests: list[Recorded] = []
        self.served_reasoning: dict[str, dict[str, Any]] = {}
        """Every reasoning item served with its encrypted content, by id."""
        self.served_phases: dict[str, str] = {}
        """Every message item served with a phase: its text, and the phase."""
        self.phases_dropped: list[tuple[int, str]] = []
        """(request number, text) of each assistant message sent back without its phase."""
        self.stream_hold = threading.Event()
        """What a streamed `ResponsesReply(pause_after=N)` waits for."""
        self.in_flight = 0
        """Requests being served: taken, not yet answered."""
        self.peak_in_flight = 0
        self.refused = 0
        """429s answered because `max_in_flight` requests were being served."""
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def remaining(self) -> int:
        """Scripted entries not yet used."""
        return len(self.script)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> HttpReply | Hangup:
        body = json.loads(raw) if raw else None
        with self._lock:
            recorded = Recorded(path, headers, raw, body, at=time.monotonic())
            self.requests.append(recorded)
            number = len(self.requests)
            responses = path in RESPONSES_PATHS
            if path not in PATHS and not responses:
                return error(404, f"Invalid URL (POST {path})")
            if headers.get("authorization") != f"Bearer {self.api_key}":
                given = headers.get("authorization", "").removeprefix("Bearer ")
                return error(
                    401,
                    f"Incorrect API key provided: {given[:3]}***{given[-4:]}.",
                    code="invalid_api_key",
                )
            if self.max_in_flight is not None and self.in_flight >= self.max_in_flight:
                self.refused += 1
                recorded.refused = True
                return error(
                    429,
                    f"Rate limit reached: {self.max_in_flight} requests at once.",
                    type="requests",
                    code="rate_limit_exceeded",
                    headers=self.refusal_headers,
                )
            if responses:
                if broken := responses_error(body or {}, self.served_reasoning):
                    return broken
                for text in phases_dropped(body or {}, self.served_phases):
                    self.phases_dropped.append((number, text))
            elif broken := pairing_error((body or {}).get("messages", [])):
                return broken
            if broken := tool_choice_error(body or {}, responses=responses):
                return broken
            entry: Reply | ResponsesReply | RecordedReply | HttpReply | Hangup | Slow
            if self.responder is not None:
                entry = self.responder(body or {})
            elif self.script:
                entry = self.script.pop(0)
            else:
                return error(
                    500, f"fake OpenAI: script exhausted at request #{number}", type="server_error"
                )
            delay = self.latency_seconds
            if isinstance(entry, Slow):
                delay, entry = delay + entry.seconds, entry.then
            if isinstance(entry, Hangup):
                return entry
            # Served: it counts in flight until its answer is sent (`finished`).
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        stream = bool((body or {}).get("stream"))
        include_usage = ((body or {}).get("stream_options") or {}).get("include_usage", False)
        if isinstance(entry, RecordedReply):
            recorded_body = entry.body
            if responses:
                self._served(recorded_body)
            if stream and responses:
                entry = HttpReply(200, None, events=responses_events(recorded_body))
            elif stream:
                entry = HttpReply(200, None, events=chat_events(recorded_body, include_usage))
            else:
                entry = HttpReply(200, recorded_body)
        elif isinstance(entry, Reply):
            completion = _completion(entry, body or {}, number, len(raw))
            if stream:
                entry = HttpReply(200, None, events=chat_events(completion, include_usage))
            else:
                entry = HttpReply(200, completion)
        elif isinstance(entry, ResponsesReply):
            response = _response(entry, body or {}, number, len(raw))
            self._served(response)
            if stream:
                entry = HttpReply(
                    200,
                    None,
                    events=responses_events(response, entry.chunk_chars),
                    pause_after=entry.pause_after,
                    hangup_after=entry.hangup_after,
                )
            else:
                entry = HttpReply(200, response)
        return replace(entry, delay_seconds=entry.delay_seconds + delay, served=True)

    def _served(self, response: dict[str, Any]) -> None:
        """Remember what a Responses reply carried that a later request must send back."""
        with self._lock:
            for item in response.get("output") or ():
                if item.get("type") == "reasoning" and item.get("encrypted_content"):
                    self.served_reasoning[str(item.get("id"))] = item
                elif item.get("type") == "message" and item.get("phase"):
                    text = "".join(part.get("text", "") for part in item.get("content") or ())
                    self.served_phases[text] = item["phase"]

    def finished(self, reply: HttpReply) -> None:
        """A served reply is about to be sent: it no longer counts in flight. (Before it is
        sent, so the next request its answer lets a worker make never finds it counted.)"""
        if reply.served:
            with self._lock:
                self.in_flight -= 1


def _completion(reply: Reply, request: dict[str, Any], number: int, size: int) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content,
        "refusal": None,
        "annotations": [],
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for id, name, arguments in reply.tool_calls
        ]
    if reply.tool_calls_json is not None:
        message["tool_calls"] = reply.tool_calls_json
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else size // 4
    completion = reply.completion_tokens
    if completion is None:
        completion = len(json.dumps(message)) // 4
    return {
        "id": f"chatcmpl-fake{number:04d}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": reply.model or request.get("model", "gpt-fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason
                or ("tool_calls" if reply.tool_calls or reply.tool_calls_json else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {
                "cached_tokens": reply.cached_tokens,
                "audio_tokens": 0,
                **(
                    {"cache_write_tokens": reply.cache_write_tokens}
                    if reply.cache_write_tokens is not None
                    else {}
                ),
            },
            "completion_tokens_details": {
                "reasoning_tokens": reply.reasoning_tokens,
                "audio_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


def _response(
    reply: ResponsesReply, request: dict[str, Any], number: int, size: int
) -> dict[str, Any]:
    items = reply.items
    if items is None:
        items = [("reasoning", reply.reasoning)] if reply.reasoning is not None else []
        items += [("text", reply.text)] if reply.text is not None else []
        items += [("call", call) for call in reply.calls]
    encrypted = "reasoning.encrypted_content" in (request.get("include") or ())
    output: list[dict[str, Any]] = []
    thought = ""
    for position, (kind, value) in enumerate(items):
        prefix = {"reasoning": "rs", "text": "msg", "call": "fc"}[kind]
        item_id = f"{prefix}_fake{number:04d}_{position}"
        if kind == "reasoning":
            summary = [{"type": "summary_text", "text": value}]
            item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": summary}
            if encrypted:
                item["encrypted_content"] = seal(item_id, summary)
            thought += value
        elif kind == "text":
            item = {
                "id": item_id,
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": value, "annotations": []}],
            }
            if reply.phase is not None:
                item["phase"] = reply.phase
        else:
            call_id, name, arguments = value
            item = {
                "id": item_id,
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        output.append(item)
    reasoning_tokens = reply.reasoning_tokens
    if reasoning_tokens is None:
        reasoning_tokens = (len(thought) + 3) // 4
    prompt = reply.input_tokens if reply.input_tokens is not None else size // 4
    completion = reply.output_tokens
    if completion is None:
        completion = len(json.dumps(output)) // 4 + reasoning_tokens
    return {
        "id": f"resp_fake{number:04d}",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": reply.status,
        "error": None,
        "incomplete_details": (
            {"reason": reply.incomplete_reason} if reply.incomplete_reason else None
        ),
        "instructions": request.get("instructions"),
        "model": reply.model or request.get("model", "gpt-fake"),
        "output": output,
        "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
        "tool_choice": "auto",
        "tools": request.get("tools") or [],
        "store": bool(request.get("store", True)),
        "metadata": {},
        "temperature": request.get("temperature", 1.0),
        "top_p": 1.0,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {
                "cached_tokens": reply.cached_tokens,
                **(
                    {"cache_write_tokens": reply.cache_write_tokens}
                    if reply.cache_write_tokens is not None
                    else {}
                ),
            },
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt + completion,
        },
    }


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def chat_events(
    completion: dict[str, Any], include_usage: bool, chunk_chars: int = 8
) -> list[tuple[str, Any]]:
    """`completion` as Chat Completions streams it: chunks of deltas, then `[DONE]`."""
    head = {key: completion[key] for key in ("id", "created", "model", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> tuple[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return ("", {**head, "choices": [choice]})

    (choice,) = completion["choices"]
    message = choice["message"]
    events = [chunk({"role": "assistant", "content": ""})]
    for piece in _chunks(message["content"] or "", chunk_chars) if message["content"] else []:
        events.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        opening = {"index": index, "id": call["id"], "type": "function"}
        opening["function"] = {"name": function["name"], "arguments": ""}
        events.append(chunk({"tool_calls": [opening]}))
        for piece in _chunks(function["arguments"], chunk_chars):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append(("", {**head, "choices": [], "usage": completion["usage"]}))
    events.append(("", "[DONE]"))
    return events


def responses_events(
    response: dict[str, Any], chunk_chars: int = 8
) -> list[tuple[str, dict[str, Any]]]:
    """`response` as the Responses API streams it."""
    events: list[tuple[str, dict[str, Any]]] = []

    def add(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    add("response.created", response={**response, "status": "in_progress", "output": []})
    for index, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            add("response.output_item.added", output_index=index, item={**item, "content": []})
            part = item["content"][0]
            empty = {**part, "text": ""}
            add("response.content_part.added", **at, content_index=0, part=empty)
            for piece in _chunks(part["text"], chunk_chars):
                add("response.output_text.delta", **at, content_index=0, delta=piece, logprobs=[])
            add("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[])
            add("response.content_part.done", **at, content_index=0, part=part)
        elif item["type"] == "reasoning":
            added = {k: v for k, v in item.items() if k != "encrypted_content"}
            add("response.output_item.added", output_index=index, item={**added, "summary": []})
            for number, summary in enumerate(item["summary"]):
                empty = {**summary, "text": ""}
                add("response.reasoning_summary_part.added", **at, summary_index=number, part=empty)
                for piece in _chunks(summary["text"], chunk_chars):
                    add(
                        "response.reasoning_summary_text.delta",
                        **at,
                        summary_index=number,
                        delta=piece,
                    )
                add(
                    "response.reasoning_summary_text.done",
                    **at,
                    summary_index=number,
                    text=summary["text"],
                )
                add(
                    "response.reasoning_summary_part.done", **at, summary_index=number, part=summary
                )
        else:
            add("response.output_item.added", output_index=index, item={**item, "arguments": ""})
            for piece in _chunks(item["arguments"], chunk_chars):
                add("response.function_call_arguments.delta", **at, delta=piece)
            add("response.function_call_arguments.done", **at, arguments=item["arguments"])
        add("response.output_item.done", output_index=index, item=item)
    add("response.completed", response=response)
    return events


def send_events(
    handler: BaseHTTPRequestHandler,
    events: list[tuple[str, Any]],
    *,
    pause_after: int | None,
    hangup_after: int | None,
    hold: threading.Event,
    headers: dict[str, str],
    pace_seconds: float = 0.0,
) -> None:
    """Send `events` as server-sent events, pausing for `hold` or hanging up where asked, and
    `pace_seconds` apart (a model that writes at a human pace)."""
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("connection", "close")
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.close_connection = True
    for number, (name, data) in enumerate(events):
        if number == pause_after:
            hold.wait()
        if number == hangup_after:
            reset(handler)
            return
        if number and pace_seconds:
            time.sleep(pace_seconds)
        line = data if isinstance(data, str) else json.dumps(data)  # Chat's "[DONE]" as is
        named = f"event: {name}\n" if name else ""  # Chat Completions names no event
        handler.wfile.write(f"{named}data: {line}\n\n".encode())
        handler.wfile.flush()


def reset(handler: BaseHTTPRequestHandler) -> None:
    """Close the handler's connection with a TCP reset (linger 0), not an orderly FIN."""
    handler.close_connection = True
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    handler.connection.close()  # before the server's orderly shutdown could send a FIN


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = fake.answer(self.path, headers, raw)
            if isinstance(reply, Hangup):
                reset(self)
                return
            time.sleep(reply.delay_seconds)
            if reply.served and fake.hold is not None:
                fake.hold.wait()
            fake.finished(reply)
            if reply.events is not None:
                try:
                    send_events(
                        self,
                        reply.events,
                        pause_after=reply.pause_after,
                        hangup_after=reply.hangup_after,
                        hold=fake.stream_hold,
                        headers={"x-request-id": f"req_fake{len(fake.requests):04d}"},
                    )
                except OSError:
                    self.close_connection = True
                return
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("x-request-id", f"req_fake{len(fake.requests):04d}")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                self.close_connection = True  # the client gave up waiting

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
