"""Anthropic Messages API: one call per activity attempt, with the SDK's own retries off.

The key comes from ANTHROPIC_API_KEY and the endpoint from ANTHROPIC_BASE_URL (read by the SDK).
The key is passed to the client explicitly, so the SDK never falls back to other credential
sources (profiles, federation). A client is built per call and closed after it.

The request is built from the transcript alone, in a fixed order, so the same transcript always
gives the same request bytes. Three prompt-cache breakpoints mark the growing prefix: the last
tool definition, the system block and the last block of the last message. Step k+1 re-sends
step k's request as its prefix, so the provider serves it from the cache written at step k. A
request sent once (a judge's verdict, a compaction's summary: `ModelRequest.purpose`) carries
none: no later call reads its prefix, and a cache write costs 1.25x the input it replaces.

Thinking (`thinking_budget_tokens`, `adaptive_thinking`): the reply's `thinking` and
`redacted_thinking` blocks are kept in the transcript as reasoning parts, exactly as sent, and go
back in their place in every later request of the run with thinking on: the API refuses a
tool-use turn whose thinking is missing or changed. With thinking off they are left out (the API
refuses them then), as is the reasoning of any other provider; the step's record counts them.

Errors are classified in `_http_errors` (shared with the other HTTP providers); a reply cut off
at the output-token limit, an empty reply or one that cannot be read is retryable as
`ProviderIncompleteReply`.
"""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import anthropic
from anthropic.types import Message as AnthropicMessage
from temporalio.exceptions import ApplicationError

from ...workflows.activity_io import ModelRequest, ModelResponse
from ...workflows.errors import AgentConfigurationError, AgentProviderError
from ...workflows.specs import ToolSpec
from ...workflows.transcript import (
    AssistantMessage,
    Message,
    ReasoningPart,
    ToolCall,
    ToolResult,
    UserMessage,
    reasoning_for,
)
from ...workflows.usage import Usage
from . import _streaming
from ._http_errors import (
    connection_error,
    cut_off_reply,
    incomplete_reply,
    provider_failures,
    provider_message,
    status_error,
    timeout_error,
    transient_error,
)
from ._tls import tls_context

PROVIDER = "Anthropic"
PROVIDER_ID, API = "anthropic", "messages"
"""How the transcript tags the reasoning this adapter keeps."""
REASONING_BLOCKS = ("thinking", "redacted_thinking")
INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"
"""Thinking between tool calls, on models that need the beta for it (newer ones do it anyway)."""
DEFAULT_MAX_TOKENS = 4096
"""`max_tokens` is required by the Messages API; used when the run does not set one."""
CACHE_CONTROL: dict[str, str] = {"type": "ephemeral"}


async def complete(request: ModelRequest) -> ModelResponse:
    """Make one Messages API call for `request` and map the reply back."""
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    if not api_key:
        raise AgentConfigurationError(
            "ANTHROPIC_API_KEY is not set: export it in the worker's environment (and "
            "ANTHROPIC_BASE_URL for another endpoint), or run with provider='scripted'"
        )
    settings = request.settings
    params, left_out = request_params_counted(request)
    # The SDK has no `temperature` argument; it goes in the body as the API expects it.
    extra_body = {"temperature": params.pop("temperature")} if "temperature" in params else None
    extra_headers = (
        {"anthropic-beta": INTERLEAVED_THINKING_BETA}
        if settings.thinking_budget_tokens is not None
        else None
    )
    with provider_failures(
        PROVIDER,
        settings.model,
        anthropic.AnthropicError,
        anthropic.APIConnectionError,
        functools.partial(provider_error, timeout_seconds=settings.timeout_seconds),
    ):
        async with anthropic.AsyncAnthropic(
            api_key=api_key,
            max_retries=0,
            timeout=settings.timeout_seconds,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=tls_context()),
        ) as client:
            publisher = _streaming.current()
            if publisher is None:
                response = await client.messages.create(
                    **params, extra_body=extra_body, extra_headers=extra_headers
                )
            else:
                async with client.messages.stream(
                    **params, extra_body=extra_body, extra_headers=extra_headers
                ) as stream:
                    async for event in stream:
                        if event.type == "content_block_delta":
                            if event.delta.type == "text_delta":
                                publisher.text(event.delta.text)
                            elif event.delta.type == "thinking_delta":
                                publisher.reasoning(event.delta.thinking)
                    # The message the stream assembled: the same as create's.
                    response = await stream.get_final_message()
    reply = to_model_response(response, request)
    return reply.model_copy(update={"reasoning_left_out": left_out}) if left_out else reply


def request_params_counted(request: ModelRequest) -> tuple[dict[str, Any], int]:
    """The Messages API body for `request` (plain dicts in a fixed key order, built fresh), and
    how many of the transcript's reasoning parts it leaves out."""
    settings = request.settings
    params: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": max_tokens(request),
    }
    thinking = thinking_param(request)
    if thinking is not None:
        params["thinking"] = thinking
    if settings.reasoning_effort is not None:
        params["output_config"] = {"effort": settings.reasoning_effort}
    # Only the loop's steps grow a prefix that the next call reads.
    cached = request.purpose == "step"
    if request.system:
        system: dict[str, Any] = {"type": "text", "text": request.system}
        if cached:
            system["cache_control"] = _cache()
        params["system"] = [system]
    params["messages"], left_out = anthropic_turns(
        request.messages, thinking=thinking is not None, cached=cached
    )
    if request.tools:
        tools = [_tool(spec) for spec in request.tools]
        if cached:
            tools[-1]["cache_control"] = _cache()
        params["tools"] = tools
        if request.tool_choice is not None:
            # A judge's verdict, one call. With thinking on the API refuses a forced tool
            # ("Thinking may not be enabled when tool_choice forces tool use"): the model is
            # asked for it, and a reply without it goes to a person.
            forced = thinking is None
            params["tool_choice"] = (
                {"type": "tool", "name": request.tool_choice, "disable_parallel_tool_use": True}
                if forced
                else {"type": "auto", "disable_parallel_tool_use": True}
            )
    if settings.temperature is not None:
        params["temperature"] = settings.temperature
    return params, left_out


def thinking_param(request: ModelRequest) -> dict[str, Any] | None:
    settings = request.settings
    if settings.thinking_budget_tokens is not None:
        return {"type": "enabled", "budget_tokens": settings.thinking_budget_tokens}
    if settings.adaptive_thinking:
        return {"type": "adaptive"}
    return None


def max_tokens(request: ModelRequest) -> int:
    settings = request.settings
    if settings.max_output_tokens is not None:
        return settings.max_output_tokens
    # Thinking counts against max_tokens, which must exceed its budget: room for both.
    return (settings.thinking_budget_tokens or 0) + DEFAULT_MAX_TOKENS


def to_anthropic_messages(
    messages: list[Message] | tuple[Message, ...], *, thinking: bool = False
) -> list[dict[str, Any]]:
    """The transcript as Messages API turns (see `anthropic_turns`)."""
    return anthropic_turns(messages, thinking=thinking)[0]


def anthropic_turns(
    messages: list[Message] | tuple[Message, ...], *, thinking: bool, cached: bool = True
) -> tuple[list[dict[str, Any]], int]:
    """The transcript as Messages API turns, and the reasoning parts left out.

    Every message becomes content blocks, and consecutive messages of one role become one turn
    (the API requires user and assistant to alternate): the tool results that answer an
    assistant message form one user turn, in call order, with any user message after them. The
    last block of the last turn carries a cache breakpoint when `cached`. Thinking blocks go back
    in their place, as they came, when `thinking` is on; otherwise, and for any other provider's
    reasoning, they are left out.
    """
    turns: list[dict[str, Any]] = []
    left_out = 0
    for message in messages:
        role, blocks, dropped = _blocks(message, thinking)
        left_out += dropped
        if not blocks:
            continue  # an assistant message with neither text nor calls says nothing
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and cached:
        last = turns[-1]["content"]
        last[-1] = {**last[-1], "cache_control": _cache()}
    return turns, left_out


def _blocks(message: Message, thinking: bool) -> tuple[str, list[dict[str, Any]], int]:
    if isinstance(message, UserMessage):
        return "user", [{"type": "text", "text": message.content}], 0
    if isinstance(message, ToolResult):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        if message.is_error:
            block["is_error"] = True
        return "user", [block], 0
    blocks: list[dict[str, Any]] = []
    items, left_out = reasoning_for(message, PROVIDER_ID, API, accepted=thinking)
    for item in items:
        if isinstance(item, ReasoningPart):
            blocks.append(json.loads(item.data))  # every field as the API sent it
        elif isinstance(item, str):
            if item.strip():  # the API refuses blank text blocks
                blocks.append({"type": "text", "text": item})
        else:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": item.id,
                    "name": item.name,
                    "input": _input(item.arguments),
                }
            )
    return "assistant", blocks, left_out


def _input(arguments: str) -> dict[str, Any]:
    """The call's arguments as the object the API requires. Arguments that are not a JSON
    object (the workflow has already answered such a call with an error) go back as {}, so the
    call and its result still pair up."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def _cache() -> dict[str, str]:
    return dict(CACHE_CONTROL)


def to_model_response(response: AnthropicMessage, request: ModelRequest) -> ModelResponse:
    """The reply as a neutral response; an unusable reply raises `ProviderIncompleteReply`."""
    model = getattr(response, "model", None) or request.settings.model
    try:
        texts: list[str] = []
        calls: list[ToolCall] = []
        # (block, whether text came before it, calls before it): placed once the text is known.
        thoughts: list[tuple[Any, bool, int]] = []
        last_type: str | None = None
        for block in response.content:
            last_type = block.type
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                arguments = json.dumps(block.input, separators=(",", ":"))
                calls.append(ToolCall(id=block.id or "", name=block.name, arguments=arguments))
            elif block.type in REASONING_BLOCKS:
                thoughts.append((block, bool(texts), len(calls)))
            # Other blocks (server tools) are never asked for and are left out.
        usage = response.usage
        cache_read = usage.cache_read_input_tokens or 0
        cache_write = usage.cache_creation_input_tokens or 0
        neutral_usage = Usage(
            input_tokens=usage.input_tokens + cache_read + cache_write,
            output_tokens=usage.output_tokens,
            cached_input_tokens=cache_read,
            cache_write_tokens=cache_write,
            reasoning_tokens=_thinking_tokens(usage),
        )
        stop_reason = response.stop_reason
        has_any_text = bool("".join(texts))
        reasoning = tuple(
            ReasoningPart(
                provider=PROVIDER_ID,
                api=API,
                model=model,
                kind=block.type,
                data=json.dumps(block.to_dict(), ensure_ascii=False, separators=(",", ":")),
                # The text is one item, first: a block after a call or the text follows it.
                position=before + (1 if has_any_text and (after_text or before) else 0),
            )
            for block, after_text, before in thoughts
        )
    except ApplicationError:
        raise
    except (AttributeError, TypeError, ValueError, RecursionError) as error:
        raise incomplete_reply(
            f"Anthropic sent a reply for model {model!r} that could not be read: "
            f"{type(error).__name__}: {error}"
        ) from error

    text = "".join(texts) or None
    has_text = bool(text and text.strip())
    if stop_reason == "model_context_window_exceeded":
        raise incomplete_reply(
            f"Anthropic model {model!r}: the reply was cut off because the context window is "
            "full (stop_reason 'model_context_window_exceeded'); set Limits.max_context_tokens "
            "below the model's window"
        )
    if stop_reason == "max_tokens":
        raise cut_off_reply(
            PROVIDER,
            model,
            max_tokens(request),
            in_tool_call=last_type == "tool_use",
            has_text=has_text,
        )
    if stop_reason == "refusal":
        if not has_text:
            raise incomplete_reply(
                f"Anthropic model {model!r} refused (stop_reason 'refusal') without any text"
            )
        calls = []  # the text is the answer; a call cut short by the refusal is not run
    elif stop_reason == "pause_turn":
        raise incomplete_reply(
            f"Anthropic model {model!r} paused its turn (stop_reason 'pause_turn'); "
            "no server tools are offered, so the reply is not complete"
        )
    if not has_text and not calls:
        raise incomplete_reply(
            f"Anthropic model {model!r} sent an empty reply: no text and no tool calls "
            f"(stop_reason={stop_reason!r})"
        )
    return ModelResponse(
        message=AssistantMessage(content=text, tool_calls=tuple(calls), reasoning=reasoning),
        usage=neutral_usage,
        model=model,
        finish_reason=stop_reason,
        response_id=getattr(response, "id", None) or None,
    )


def _thinking_tokens(usage: Any) -> int:
    details = getattr(usage, "output_tokens_details", None)
    return int(getattr(details, "thinking_tokens", 0) or 0)


def provider_error(error: anthropic.AnthropicError, *, timeout_seconds: float) -> ApplicationError:
    """The one place an SDK error becomes retryable (transient) or run-ending (a refusal)."""
    if isinstance(error, anthropic.APITimeoutError):
        return timeout_error(PROVIDER, timeout_seconds)
    if isinstance(error, anthropic.APIConnectionError):
        return connection_error(PROVIDER, error.__cause__)
    if not isinstance(error, anthropic.APIStatusError):
        return AgentProviderError(f"Anthropic client error: {error}")
    if error.status_code < 400:
        # An `error` event in a stream that had started with 200 (overloaded, say): the attempt
        # is lost, as with a 5xx, and the retry starts the stream anew.
        message = provider_message(error.body, error.message)
        return transient_error(f"{PROVIDER}'s stream broke off with an error: {message}")
    return status_error(
        PROVIDER,
        error.status_code,
        provider_message(error.body, error.message),
        headers=error.response.headers,
        request_id=error.request_id,
        key_variable="ANTHROPIC_API_KEY",
        base_url_variable="ANTHROPIC_BASE_URL",
    )
