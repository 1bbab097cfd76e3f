"""A scripted, local stand-in for Anthropic's Messages API (POST /v1/messages).

    with FakeAnthropic([Reply(tool_uses=[("toolu_a", "add", {"a": 1})]), Reply("done")]) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        ...
        assert fake.remaining == 0 and fake.requests[0].body["system"][0]["type"] == "text"

Each accepted request takes the next scripted entry: a `Reply` (an assistant message) or an
`HttpReply` (any status, JSON body and headers, sent as is; `error()` builds the API's error
shape). Like the real API, and without using the script, it answers 401 to a wrong key (sent as
`x-api-key`, or as `authorization: Bearer`, which is what the SDK sends) and 400 to a request it
would refuse: roles that do not alternate, a `tool_use` not answered by a `tool_result` in the
next user message, a `tool_result` for an id the previous assistant message did not use, blank
text, more than four cache breakpoints. An exhausted script answers 500.

Thinking, as the API holds it: a `Reply(thinking=...)` starts with a `thinking` block signed by
the fake (`redacted_thinking=...` adds a `redacted_thinking` block with sealed data), and a
request with `thinking` on is refused with the API's 400 when the assistant turn before the last
tool results does not start with a thinking block, when any thinking block's signature (or
redacted data) is not one the fake made for exactly that text, or when its settings break the
rules (budget under 1024, max_tokens not above it, a temperature other than 1). With thinking off,
that turn may hold no thinking at all.

A request with `"stream": true` gets the same message as server-sent events, as the API sends
them (message_start, each block's start, deltas and stop, message_delta, message_stop), text and
thinking in `chunk_chars` pieces. `Reply(pause_after=N)` waits for the fake's `hold` (a
threading.Event) after N events, so a test can see a half-written reply; `hangup_after=N` resets
the connection after N events instead (a stream that breaks off).

Faults a network brings are scripted too: `Hangup()` resets the connection without an answer,
`Slow(seconds, entry)` answers only after a delay, and `HttpReply(raw=...)` sends any bytes.

`RecordedReply(body)` answers with a message recorded from the real API (tests/recorded/), sent as
it was (as events when the request streams); its thinking blocks, signed by the real API, are
taken back as the API would: exactly as they were sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fake_openai import reset, send_events

PATH = "/v1/messages"
MAX_CACHE_BREAKPOINTS = 4
_SECRET = b"fake-anthropic-thinking-key"
MISSING_THINKING = (
    "messages.{index}.content.0.type: Expected 'thinking' or 'redacted_thinking', but found "
    "'{found}'. When 'thinking' is enabled, a final 'assistant' message must start with a "
    "thinking block (preceeding the lastmost set of 'tool_use' and 'tool_result' blocks)"
)
"""The API's 400 for a tool-use turn sent back without its thinking (issue 19)."""


@dataclass
class Reply:
    text: str | None = None
    """One text block, before any tool_use block."""
    tool_uses: list[tuple[str, str, Any]] = field(default_factory=list)
    """(id, name, input) per call; input is sent as given (normally an object)."""
    stop_reason: str | None = None
    """Defaults to "tool_use" when there are calls, else "end_turn"."""
    content: list[dict[str, Any]] | None = None
    """Raw content blocks, sent instead of those built from `text` and `tool_uses`."""
    content_json: str | None = None
    """The content array as JSON text, sent verbatim: for what Python's json cannot encode
    (nesting deeper than its recursion limit)."""
    input_tokens: int | None = None
    """Uncached input tokens; defaults to an estimate from the request's size."""
    output_tokens: int | None = None
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    model: str | None = None
    """Defaults to the requested model."""
    thinking: str | None = None
    """A thinking block, first, signed by the fake."""
    redacted_thinking: str | None = None
    """A redacted_thinking block after it, its data sealed by the fake (this text, encrypted)."""
    thinking_tokens: int | None = None
    """output_tokens_details.thinking_tokens; defaults to an estimate from the thinking."""
    chunk_chars: int = 8
    """Streamed: the size of each text, thinking or input delta."""
    pause_after: int | None = None
    """Streamed: wait for the fake's `hold` after this many events."""
    hangup_after: int | None = None
    """Streamed: reset the connection after this many events."""
    pace_seconds: float = 0.0
    """Streamed: the time between two events."""


@dataclass
class RecordedReply:
    """A message recorded from the real API, sent as it was (see tests/recorded/)."""

    body: dict[str, Any]


def signature(thinking: str) -> str:
    """The fake's signature of a thinking text: any change to the text breaks it."""
    return base64.b64encode(hmac.new(_SECRET, thinking.encode(), hashlib.sha256).digest()).decode()


def sealed(text: str) -> str:
    """A redacted_thinking block's data: the text and its seal, opaque to the client."""
    payload = base64.b64encode(text.encode()).decode()
    return f"{payload}.{signature('redacted:' + payload)}"


def _unsealed(data: str) -> bool:
    payload, _, seal = data.partition(".")
    return hmac.compare_digest(seal, signature("redacted:" + payload))


@dataclass
class HttpReply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    """How long the fake waits before answering; a client that gave up meanwhile gets nothing."""
    raw: bytes | None = None
    """Sent instead of `body` encoded as JSON: a body JSON cannot encode, or not JSON at all."""
    events: list[tuple[str, dict[str, Any]]] | None = None
    """Sent instead of `body` as server-sent events (name, data)."""
    pause_after: int | None = None
    hangup_after: int | None = None
    pace_seconds: float = 0.0


@dataclass
class Hangup:
    """Read the request, then reset the connection without answering (a dropped link)."""


@dataclass
class Slow:
    """Answer with `then`, but only after `seconds`: slower than the client's timeout, say."""

    seconds: float
    then: Reply | RecordedReply | HttpReply


def error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> HttpReply:
    body = {"type": "error", "error": {"type": type, "message": message}}
    return HttpReply(status, body, dict(headers or {}))


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    """Lower-cased names."""
    raw: bytes
    body: Any


def request_error(body: dict[str, Any], served: Collection[str] = ()) -> HttpReply | None:
    """The API's 400 for a request it refuses before the model sees it; None when valid.
    `served`: the reasoning blocks of recorded messages (`block_key`), which the real API
    signed."""
    if not isinstance(body.get("max_tokens"), int):
        return error(400, "max_tokens: Field required")
    messages = body.get("messages") or []
    if not messages:
        return error(400, "messages: at least one message is required")
    if (breakpoints := _count_cache_control(body)) > MAX_CACHE_BREAKPOINTS:
        return error(
            400,
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {breakpoints}.",
        )
    return pairing_error(messages) or thinking_error(body, served) or tool_choice_error(body)


def tool_choice_error(body: dict[str, Any]) -> HttpReply | None:
    """The API's 400s for `tool_choice`: a forced tool with thinking on, a tool that is not
    offered, a choice without tools; None when it keeps the rules."""
    choice = body.get("tool_choice")
    if choice is None:
        return None
    kind = choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        return error(400, f"tool_choice.type: Input tag '{kind}' found using 'type' does not match")
    thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    if thinking and kind in ("any", "tool"):
        return error(400, "Thinking may not be enabled when tool_choice forces tool use.")
    names = [tool.get("name") for tool in body.get("tools") or ()]
    if kind == "tool" and choice.get("name") not in names:
        return error(400, f"tool_choice.name: Tool '{choice.get('name')}' not found in tools")
    return None


def block_key(block: dict[str, Any]) -> str:
    """A thinking or redacted_thinking block as served, to know it again when it comes back."""
    kept = {key: value for key, value in block.items() if key != "cache_control"}
    return json.dumps(kept, sort_keys=True)


def thinking_error(body: dict[str, Any], served: Collection[str] = ()) -> HttpReply | None:
    """The API's 400s for thinking: settings that do not go with it, a thinking block changed
    or not made by the API, the open tool-use turn without its thinking (thinking on) or with
    it (thinking off); None when the request keeps the rules."""
    thinking = body.get("thinking") or {"type": "disabled"}
    kind = thinking.get("type")
    enabled = kind in ("enabled", "adaptive")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return error(
                400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
            )
        if body["max_tokens"] <= budget:
            return error(
                400,
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                "documentation at https://docs.claude.com/en/docs/build-with-claude/"
                "extended-thinking#max-tokens-and-context-window-size",
            )
    if enabled and body.get("temperature", 1) != 1:
        return error(
            400,
            "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. "
            "Please consult our documentation at https://docs.claude.com/en/docs/"
            "build-with-claude/extended-thinking#feature-compatibility",
        )
    messages = body.get("messages") or []
    for index, message in enumerate(messages):
        for position, block in enumerate(_blocks(message.get("content"))):
            where = f"messages.{index}.content.{position}"
            if (
                block.get("type") in ("thinking", "redacted_thinking")
                and block_key(block) in served
            ):
                continue  # a recorded block, signed by the real API, sent back as it came
            if block.get("type") == "thinking":
                text, signed = block.get("thinking"), block.get("signature")
                if not isinstance(text, str) or not isinstance(signed, str):
                    return error(400, f"{where}.thinking.signature: Field required")
                if not hmac.compare_digest(signed, signature(text)):
                    return error(400, f"{where}: Invalid `signature` in `thinking` block")
            elif block.get("type") == "redacted_thinking":
                data = block.get("data")
                if not isinstance(data, str) or not _unsealed(data):
                    return error(400, f"{where}: Invalid `data` in `redacted_thinking` block")
    final = _final_tool_use_turn(messages)
    if final is None:
        return None
    blocks = _blocks(messages[final].get("content"))
    kinds = [block.get("type") for block in blocks]
    if kind == "enabled" and kinds[0] not in ("thinking", "redacted_thinking"):
        return error(400, MISSING_THINKING.format(index=final, found=kinds[0]))
    if not enabled and ("thinking" in kinds or "redacted_thinking" in kinds):
        position = next(i for i, k in enumerate(kinds) if k in ("thinking", "redacted_thinking"))
        return error(
            400,
            f"messages.{final}.content.{position}.type: When thinking is disabled, an "
            "`assistant` message in the final position cannot contain `thinking`. To use "
            "thinking blocks, enable `thinking` in your request.",
        )
    return None


def _final_tool_use_turn(messages: list[dict[str, Any]]) -> int | None:
    """The assistant turn whose tool_use blocks the last user turn answers (the open tool-use
    turn, the one thinking rules bind), or a final assistant turn; None when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") != "assistant":
            continue
        blocks = _blocks(messages[index].get("content"))
        is_last = index == len(messages) - 1
        answered = index == len(messages) - 2 and any(b.get("type") == "tool_use" for b in blocks)
        return index if (is_last or answered) and blocks else None
    return None


def pairing_error(messages: list[dict[str, Any]]) -> HttpReply | None:
    """The API's 400 when roles do not alternate (starting with user), when a `tool_use` is not
    answered by a `tool_result` in the very next user message, or when a `tool_result` names an
    id the previous assistant message did not use; None when the sequence is valid."""
    waiting: list[str] = []  # ids of the previous assistant message's tool_use blocks
    asked_at = 0
    previous_role = None
    for index, message in enumerate(messages):
        role = message.get("role")
        if index == 0 and role != "user":
            return error(400, 'messages: first message must use the "user" role')
        if role not in ("user", "assistant"):
            return error(400, f"messages.{index}.role: Input should be 'user' or 'assistant'")
        if role == previous_role:
            return error(
                400,
                'messages: roles must alternate between "user" and "assistant", but found '
                f'multiple "{role}" roles in a row',
            )
        previous_role = role
        blocks = _blocks(message.get("content"))
        if not blocks:
            return error(
                400,
                f"messages.{index}: all messages must have non-empty content except for the "
                "optional final assistant message",
            )
        for position, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                return error(
                    400,
                    f"messages.{index}.content.{position}: text content blocks must be non-empty",
                )
        if role == "user":
            answered: list[str] = []
            for position, block in enumerate(blocks):
                if block.get("type") != "tool_result":
                    continue
                tool_use_id = block.get("tool_use_id")
                if tool_use_id not in waiting or tool_use_id in answered:
                    return error(
                        400,
                        f"messages.{index}.content.{position}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {tool_use_id}. Each `tool_result` block must have "
                        "a corresponding `tool_use` block in the previous message.",
                    )
                answered.append(tool_use_id)
            missing = [i for i in waiting if i not in answered]
            if missing:
                return _unanswered(asked_at, missing)
            waiting = []
        else:
            waiting = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            asked_at = index
    if waiting:
        return _unanswered(asked_at, waiting)
    return None


def _unanswered(asked_at: int, missing: list[str]) -> HttpReply:
    # The API names the message that should have held the results: the one after the call.
    return error(
        400,
        f"messages.{asked_at + 1}: `tool_use` ids were found without `tool_result` blocks "
        f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
        "corresponding `tool_result` block in the next message.",
    )


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [block for block in content or () if isinstance(block, dict)]


def _count_cache_control(body: dict[str, Any]) -> int:
    blocks: list[Any] = [*(body.get("tools") or ())]
    system = body.get("system")
    if isinstance(system, list):
        blocks += system
    for message in body.get("messages") or ():
        blocks += _blocks(message.get("content"))
    return sum(1 for block in blocks if isinstance(block, dict) and "cache_control" in block)


def sent_key(headers: dict[str, str]) -> str | None:
    """The API key a request carries: `x-api-key`, or `authorization: Bearer` as the SDK (2.x)
    sends it; the API accepts either."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    authorization = headers.get("authorization", "")
    return authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None


class FakeAnthropic:
    def __init__(
        self,
        script: list[Reply | RecordedReply | HttpReply | Hangup | Slow] | None = None,
        *,
        api_key: str = "sk-ant-test-fake",
    ) -> None:
        self.script = list(script or [])
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self.served: set[str] = set()
        """Every thinking and redacted_thinking block of the recorded messages served."""
        self.hold = threading.Event()
        """What a streamed `Reply(pause_after=N)` waits for."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        # The SDK appends /v1/messages itself.
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def remaining(self) -> int:
        """Scripted entries not yet used."""
        return len(self.script)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FakeAnthropic:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def answer(self, path: str, headers: dict[str, str], raw: bytes) -> HttpReply | Hangup:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with self._lock:
            self.requests.append(Recorded(path, headers, raw, body))
            number = len(self.requests)
            if path.split("?")[0] != PATH:
                return error(404, f"Not found: POST {path}", type="not_found_error")
            if sent_key(headers) != self.api_key:
                return error(401, "invalid x-api-key", type="authentication_error")
            if not headers.get("anthropic-version"):
                return error(400, "anthropic-version: header is required")
            if not isinstance(body, dict):
                return error(400, "The request body is not valid JSON.")
            if broken := request_error(body, self.served):
                return broken
            if not self.script:
                return error(
                    500, f"fake Anthropic: script exhausted at request #{number}", type="api_error"
                )
            entry = self.script.pop(0)
        delay = 0.0
        if isinstance(entry, Slow):
            delay, entry = entry.seconds, entry.then
        if isinstance(entry, Hangup):
            return entry
        if isinstance(entry, RecordedReply):
            recorded = entry.body
            with self._lock:
                self.served.update(
                    block_key(block)
                    for block in recorded.get("content") or ()
                    if block.get("type") in ("thinking", "redacted_thinking")
                )
            if body.get("stream"):
                entry = HttpReply(200, None, events=sse_events(recorded))
            else:
                entry = HttpReply(200, recorded)
        if isinstance(entry, Reply):
            message = _message(entry, body, number, len(raw))
            raw_reply = None
            if entry.content_json is not None:
                message["content"] = _RAW_CONTENT
                encoded = json.dumps(message)
                raw_reply = encoded.replace(json.dumps(_RAW_CONTENT), entry.content_json).encode()
            if body.get("stream"):
                entry = HttpReply(
                    200,
                    None,
                    events=sse_events(message, entry.chunk_chars),
                    pause_after=entry.pause_after,
                    hangup_after=entry.hangup_after,
                    pace_seconds=entry.pace_seconds,
                )
            else:
                entry = HttpReply(200, message, raw=raw_reply)
        return replace(entry, delay_seconds=entry.delay_seconds + delay) if delay else entry


_RAW_CONTENT = "\u0000content_json\u0000"


def _message(reply: Reply, request: dict[str, Any], number: int, size: int) -> dict[str, Any]:
    content = reply.content
    if content is None:
        content = []
        if reply.thinking is not None:
            content.append(
                {
                    "type": "thinking",
                    "thinking": reply.thinking,
                    "signature": signature(reply.thinking),
                }
            )
        if reply.redacted_thinking is not None:
            content.append({"type": "redacted_thinking", "data": sealed(reply.redacted_thinking)})
        if reply.text is not None:
            content.append({"type": "text", "text": reply.text})
        for id, name, input in reply.tool_uses:
            content.append({"type": "tool_use", "id": id, "name": name, "input": input})
    uncached = reply.input_tokens if reply.input_tokens is not None else size // 4
    thinking_tokens = reply.thinking_tokens
    if thinking_tokens is None:
        thought = (reply.thinking or "") + (reply.redacted_thinking or "")
        thinking_tokens = (len(thought) + 3) // 4
    output = reply.output_tokens
    if output is None:
        output = max(len(json.dumps(content)) // 4, 1) + thinking_tokens
    return {
        "id": f"msg_fake{number:04d}",
        "type": "message",
        "role": "assistant",
        "model": reply.model or request.get("model", "claude-fake"),
        "content": content,
        "stop_reason": reply.stop_reason or ("tool_use" if reply.tool_uses else "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": uncached,
            "cache_creation_input_tokens": reply.cache_creation_input_tokens,
            "cache_read_input_tokens": reply.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": reply.cache_creation_input_tokens,
                "ephemeral_1h_input_tokens": 0,
            },
            "output_tokens": output,
            "output_tokens_details": {"thinking_tokens": thinking_tokens},
            "service_tier": "standard",
        },
    }


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse_events(message: dict[str, Any], chunk_chars: int = 8) -> list[tuple[str, dict[str, Any]]]:
    """`message` as the Messages API streams it."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(message["content"]):
        kind = block["type"]
        deltas: list[dict[str, Any]] = []
        if kind == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": c} for c in _chunks(block["text"], chunk_chars)
            ]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": c}
                for c in _chunks(block["thinking"], chunk_chars)
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "tool_use":
            first = {**block, "input": {}}
            arguments = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(arguments, chunk_chars)
            ]
        else:
            first = block
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    final_usage = {
        key: usage[key]
        for key in (
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
            "output_tokens_details",
        )
        if key in usage
    }
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": final_usage,
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = fake.answer(self.path, headers, raw)
            if isinstance(reply, Hangup):
                reset(self)
                return
            time.sleep(reply.delay_seconds)
            if reply.events is not None:
                try:
                    send_events(
                        self,
                        reply.events,
                        pause_after=reply.pause_after,
                        hangup_after=reply.hangup_after,
                        hold=fake.hold,
                        headers={"request-id": f"req_fake{len(fake.requests):04d}"},
                        pace_seconds=reply.pace_seconds,
                    )
                except OSError:
                    self.close_connection = True
                return
            payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("request-id", f"req_fake{len(fake.requests):04d}")
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                self.close_connection = True  # the client gave up waiting

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
