"""A deterministic model that plays a scripted conversation: the offline demo and the tests.

It is stateless: the reply it plays is the one for the request's step (reply N at step N), so a
retried or replayed call gets the same reply. It fails the run (non-retryably) when the
conversation leaves its script, saying where and how. docs/providers.md#the-scripted-model is
its reference.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from pydantic import BaseModel
from temporalio import activity

from ...workflows.activity_io import ModelRequest, ModelResponse
from ...workflows.errors import ScriptedModelMismatch
from ...workflows.transcript import AssistantMessage, ToolCall, ToolResult
from ...workflows.usage import Usage

_requests: OrderedDict[str, list[ModelRequest]] = OrderedDict()
RECORDED_RUNS = 1_000
"""The newest runs whose requests are kept while recording, so that a benchmark of many runs
stays bounded."""
_recording = 0
"""The `requests_recorded()` blocks open now; none in a worker, which keeps nothing."""


@contextmanager
def requests_recorded() -> Iterator[None]:
    """Keep the requests this process's scripted model receives while the block runs.

    For tests and benchmarks, which read them back with `recorded_requests` inside the block.
    Off otherwise: a worker serving scripted runs (the demo, an app's tests against a shared
    worker) would hold whole transcripts of its last runs in memory, for no reader. What was
    kept is forgotten when the outermost block ends.
    """
    global _recording
    _recording += 1
    try:
        yield
    finally:
        _recording -= 1
        if not _recording:
            _requests.clear()


def recorded_requests(workflow_id: str) -> list[ModelRequest]:
    """The requests this process's scripted model received for a run, attempts included.

    Raises RuntimeError outside `requests_recorded()`, where nothing is kept: an empty list
    would read as a run that made no model call.
    """
    if not _recording:
        raise RuntimeError(
            "the scripted model keeps its requests only inside scripted.requests_recorded()"
        )
    return list(_requests.get(workflow_id, []))


def estimate_tokens(text: str) -> int:
    """About four characters a token: good enough for budgets when no provider counts."""
    return (len(text) + 3) // 4


async def complete(request: ModelRequest) -> ModelResponse:
    if _recording and activity.in_activity():
        _record(activity.info().workflow_id or "", request)
    if request.purpose == "summary":
        return _summary(request)
    script = request.settings.script
    # The step, not the assistant messages in the request: compaction may have dropped some. A
    # judge (its own settings, its own script) plays one turn per call it judges.
    judge = request.purpose == "judge"
    turn_index = (request.judgement if judge else request.step) - 1
    if turn_index >= len(script):
        whose = "the judge's script" if judge else "the script"
        raise ScriptedModelMismatch(
            f"{whose} has {len(script)} replies and the run asked for reply {turn_index + 1}; "
            f"the last message was: {_describe(request.messages[-1]) if request.messages else '-'}"
        )
    turn = script[turn_index]
    if turn.delay_seconds:
        await asyncio.sleep(turn.delay_seconds)
    since_last_reply = _messages_since_last_reply(request)
    if turn.expect is not None and turn.expect not in since_last_reply:
        raise ScriptedModelMismatch(
            f"reply {turn_index + 1} expects the conversation to contain {turn.expect!r} since "
            f"the previous reply; it has: {since_last_reply[:500]!r}"
        )
    text = _fill_template(turn.text, request) if turn.text is not None else None
    calls = tuple(
        ToolCall(
            id=call.id or f"call_{turn_index + 1}_{position + 1}",
            name=call.name,
            arguments=call.arguments
            if isinstance(call.arguments, str)
            else json.dumps(call.arguments, separators=(",", ":")),
        )
        for position, call in enumerate(turn.calls)
    )
    message = AssistantMessage(content=text, tool_calls=calls)
    # estimate_tokens of the system prompt, the messages' JSON and the tools' JSON, one after
    # the other: their lengths added up.
    chars = len(request.system or "") + _json_chars(request.messages) + _json_chars(request.tools)
    usage = turn.usage or Usage(
        input_tokens=(chars + 3) // 4,
        output_tokens=estimate_tokens(message.model_dump_json()),
    )
    return ModelResponse(
        message=message,
        usage=usage,
        model=request.settings.model,
        finish_reason="tool_calls" if calls else "stop",
    )


def _record(workflow_id: str, request: ModelRequest) -> None:
    _requests.setdefault(workflow_id, []).append(request)
    _requests.move_to_end(workflow_id)
    while len(_requests) > RECORDED_RUNS:
        _requests.popitem(last=False)


_sizes: OrderedDict[int, tuple[BaseModel, int]] = OrderedDict()
_SIZES_KEPT = 8_192


def _json_chars(items: Sequence[BaseModel]) -> int:
    """len(json.dumps([item.model_dump(mode="json") for item in items])), each item's share
    counted once: a run's calls send the same message objects again (the message store keeps
    them parsed), and dumping the whole transcript at every call made the estimate linear in the
    run's length. Keyed by identity; the entry holds the object, so its id is not reused."""
    total = 0
    for item in items:
        kept = _sizes.get(id(item))
        if kept is None or kept[0] is not item:
            kept = (item, len(json.dumps(item.model_dump(mode="json"))))
            _sizes[id(item)] = kept
            if len(_sizes) > _SIZES_KEPT:
                _sizes.popitem(last=False)
        total += kept[1]
    return total + 2 + 2 * max(len(items) - 1, 0)


_TEMPLATE = re.compile(r"\{last_tool_result(?:\.(\w+))?\}")


def _fill_template(text: str, request: ModelRequest) -> str:
    """`{last_tool_result}` is the newest result; `{last_tool_result.key}` a key of its JSON."""
    last = next((m.content for m in reversed(request.messages) if isinstance(m, ToolResult)), "")

    def fill(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return last
        try:
            value = json.loads(last)[match.group(1)]
        except (ValueError, KeyError, TypeError):
            raise ScriptedModelMismatch(
                f"the script wants {match.group(0)} but the newest tool result has no such "
                f"key: {last[:300]!r}"
            ) from None
        return str(value)

    return _TEMPLATE.sub(fill, text)


def _summary(request: ModelRequest) -> ModelResponse:
    """A deterministic stand-in for a summary: the start of what it was asked to summarise."""
    text = (request.messages[-1].content or "") if request.messages else ""
    message = AssistantMessage(content=f"(scripted summary) {text[:300]}")
    return ModelResponse(
        message=message,
        usage=Usage(
            input_tokens=estimate_tokens((request.system or "") + text),
            output_tokens=estimate_tokens(message.content or ""),
        ),
        model=request.settings.model,
        finish_reason="stop",
    )


def _messages_since_last_reply(request: ModelRequest) -> str:
    texts: list[str] = []
    for message in reversed(request.messages):
        if isinstance(message, AssistantMessage):
            break
        texts.append(message.content)
    return "\n".join(reversed(texts))


def _describe(message: object) -> str:
    return str(message)[:300]
