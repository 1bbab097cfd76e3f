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

For many runs at once, a `responder` answers each request from its body instead of the script,
and `max_in_flight=N` makes the fake a provider that serves N requests at once: one more gets
OpenAI's 429 with a `retry-after` (`refusal_headers`), and `in_flight`, `peak_in_flight` and
`refused` count them at the fake. `latency_seconds` delays every reply served, and `hold` (a
threading.Event) keeps the requests it serves in flight until it is set.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = ("/v1/chat/completions", "/chat/completions")


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
    model: str | None = None
    """Defaults to the requested model."""


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


@dataclass
class Hangup:
    """Read the request, then reset the connection without answering (a dropped link)."""


@dataclass
class Slow:
    """Answer with `then`, but only after `seconds`: slower than the client's timeout, say."""

    seconds: float
    then: Reply | HttpReply


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
        script: list[Reply | HttpReply | Hangup | Slow] | None = None,
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
            if path not in PATHS:
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
            if broken := pairing_error((body or {}).get("messages", [])):
                return broken
            entry: Reply | HttpReply | Hangup | Slow
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
        if isinstance(entry, Reply):
            entry = HttpReply(200, _completion(entry, body or {}, number, len(raw)))
        return replace(entry, delay_seconds=entry.delay_seconds + delay, served=True)

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
            "prompt_tokens_details": {"cached_tokens": reply.cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    }


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
