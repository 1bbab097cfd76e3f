"""OpenAI Chat Completions: one call per activity attempt, with the SDK's own retries off.

The key comes from OPENAI_API_KEY and the endpoint from OPENAI_BASE_URL (read by the SDK). A
client is built per call and closed after it, so nothing is bound to an event loop or created at
import time; the connection set-up is small beside a model call, with the process's one TLS
context (`_tls`).

The request is built from the transcript alone, in a fixed order, so the same transcript always
gives the same request bytes and the provider's prompt cache can match the shared prefix.

Errors are classified in `_http_errors` (shared with the other HTTP providers); a reply cut off
at the output-token limit, an empty reply or one that cannot be read is retryable as
`ProviderIncompleteReply`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import AsyncIterator
from typing import Any

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall
from temporalio.exceptions import ApplicationError

from ...workflows.activity_io import ModelRequest, ModelResponse
from ...workflows.errors import AgentConfigurationError, AgentProviderError
from ...workflows.model_settings import ModelSettings
from ...workflows.specs import ToolSpec
from ...workflows.transcript import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResult,
    UserMessage,
)
from ...workflows.usage import Usage
from . import _streaming
from ._http_errors import (
    MAX_RETRY_AFTER,
    RETRYABLE_STATUSES,
    TRANSIENT_ERROR_TYPE,
    connection_error,
    cut_off_reply,
    incomplete_reply,
    provider_failures,
    provider_message,
    retry_after,
    status_error,
    timeout_error,
)
from ._tls import tls_context

__all__ = [
    "MAX_RETRY_AFTER",
    "RETRYABLE_STATUSES",
    "TRANSIENT_ERROR_TYPE",
    "complete",
    "openai_client",
    "provider_error",
    "request_params",
    "retry_after",
    "to_openai_messages",
    "usage_count",
]

PROVIDER = "OpenAI"


async def complete(request: ModelRequest) -> ModelResponse:
    """Make one Chat Completions call for `request` and map the reply back."""
    params = request_params(request)
    async with openai_client(request.settings) as client:
        publisher = _streaming.current()
        if publisher is None:
            response = await client.chat.completions.create(**params)
        else:
            response = await _streamed(client, params, publisher)
    return to_model_response(response, request)


@contextlib.asynccontextmanager
async def openai_client(settings: ModelSettings) -> AsyncIterator[openai.AsyncOpenAI]:
    """A client for one call, SDK retries off, closed after it; every failure inside the block
    is mapped by `provider_failures`. Shared by Chat Completions and the Responses adapter: one
    SDK, one key, one classification."""
    api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key:
        raise AgentConfigurationError(
            "OPENAI_API_KEY is not set: export it in the worker's environment (and "
            "OPENAI_BASE_URL for an OpenAI-compatible endpoint), or run with provider='scripted'"
        )
    with provider_failures(
        PROVIDER,
        settings.model,
        openai.OpenAIError,
        openai.APIConnectionError,
        functools.partial(provider_error, timeout_seconds=settings.timeout_seconds),
    ):
        async with openai.AsyncOpenAI(
            api_key=api_key,
            max_retries=0,
            timeout=settings.timeout_seconds,
            http_client=openai.DefaultAsyncHttpxClient(verify=tls_context()),
        ) as client:
            yield client


async def _streamed(
    client: openai.AsyncOpenAI, params: dict[str, Any], publisher: _streaming.StreamPublisher
) -> ChatCompletion:
    """The call streamed (`stream=True`, usage in the last chunk), its chunks assembled into the
    completion `create` would have returned. (The SDK's `chat.completions.stream` helper parses
    only strict tools.)"""
    chunks = await client.chat.completions.create(
        **params, stream=True, stream_options={"include_usage": True}
    )
    head: dict[str, Any] = {}
    content: list[str] = []
    refusal: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = None
    usage = None
    async for chunk in chunks:
        head = head or {"id": chunk.id, "created": chunk.created, "model": chunk.model}
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            delta = choice.delta
            if delta.content:
                content.append(delta.content)
                publisher.text(delta.content)
            if delta.refusal:
                refusal.append(delta.refusal)
            for call in delta.tool_calls or ():
                whole = calls.setdefault(
                    call.index,
                    {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                )
                whole["id"] = call.id or whole["id"]
                if call.function is not None:
                    whole["function"]["name"] += call.function.name or ""
                    whole["function"]["arguments"] += call.function.arguments or ""
            finish_reason = choice.finish_reason or finish_reason
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(content) if content else None,
        "refusal": "".join(refusal) if refusal else None,
    }
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return ChatCompletion.model_validate(
        {
            **head,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason or "stop"}],
            "usage": usage,
        }
    )


def request_params(request: ModelRequest) -> dict[str, Any]:
    """The Chat Completions parameters for `request`: the same request, the same bytes."""
    settings = request.settings
    params: dict[str, Any] = {
        "model": settings.model,
        "messages": to_openai_messages(request.system, request.messages),
    }
    if request.tools:
        params["tools"] = [_tool(spec) for spec in request.tools]
        params["parallel_tool_calls"] = request.tool_choice is None
        if request.tool_choice is not None:  # a judge's verdict: that one call
            params["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice}}
    if settings.temperature is not None:
        params["temperature"] = settings.temperature
    if settings.max_output_tokens is not None:
        params["max_completion_tokens"] = settings.max_output_tokens
    return params


def to_model_response(response: ChatCompletion, request: ModelRequest) -> ModelResponse:
    """The reply as a neutral response; an unusable reply raises `ProviderIncompleteReply`."""
    settings = request.settings
    model = getattr(response, "model", None) or settings.model
    try:
        choices = response.choices
        if not choices:
            raise incomplete_reply(f"OpenAI sent an empty reply (no choices) for model {model!r}")
        choice = choices[0]
        reply = choice.message
        if reply is None:
            raise incomplete_reply(f"OpenAI sent a choice without a message for model {model!r}")
        calls = []
        for call in reply.tool_calls or ():
            if isinstance(call, ChatCompletionMessageFunctionToolCall):
                name, arguments = call.function.name, call.function.arguments
            else:  # a custom (free-text) tool call; none is offered, but keep the pairing intact
                name, arguments = call.custom.name, call.custom.input
            # Arguments are kept as raw text, even invalid JSON: the workflow answers that.
            calls.append(ToolCall(id=call.id or "", name=name, arguments=arguments or ""))
        # A refusal stands in for the text, so the loop sees why there is no answer.
        text = reply.content if reply.content is not None else reply.refusal
        finish_reason = choice.finish_reason
        usage = response.usage
        prompt_details = usage.prompt_tokens_details if usage else None
        completion_details = usage.completion_tokens_details if usage else None
        # prompt_tokens counts every input token, cache reads and writes included (as
        # Usage.input_tokens does). Writes are reported by GPT-5.6 and later, which bill them.
        neutral_usage = Usage(
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            cached_input_tokens=usage_count(prompt_details, "cached_tokens"),
            cache_write_tokens=usage_count(prompt_details, "cache_write_tokens"),
            reasoning_tokens=usage_count(completion_details, "reasoning_tokens"),
        )
    except ApplicationError:
        raise
    except (AttributeError, TypeError, ValueError, RecursionError) as error:
        raise incomplete_reply(
            f"OpenAI sent a reply for model {model!r} that could not be read: "
            f"{type(error).__name__}: {error}"
        ) from error

    has_text = bool(text and text.strip())
    if finish_reason == "length":
        raise cut_off_reply(
            PROVIDER, model, settings.max_output_tokens, in_tool_call=bool(calls), has_text=has_text
        )
    if not has_text and not calls:
        raise incomplete_reply(
            f"OpenAI model {model!r} sent an empty reply: no text and no tool calls "
            f"(finish_reason={finish_reason!r})"
        )
    return ModelResponse(
        message=AssistantMessage(content=text, tool_calls=tuple(calls)),
        usage=neutral_usage,
        model=model,
        finish_reason=finish_reason,
        response_id=getattr(response, "id", None) or None,
    )


def usage_count(details: object, name: str) -> int:
    """A count of a usage details object; 0 when the body leaves it out. The SDK builds its
    models without validation, so a field a body does not carry (`cache_write_tokens` before
    GPT-5.6) is missing from the object, not 0, even where the SDK's type requires it."""
    return int(getattr(details, name, None) or 0)


def to_openai_messages(
    system: str | None, messages: list[Message] | tuple[Message, ...]
) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages: plain dicts in a fixed key order."""
    out: list[dict[str, Any]] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": message.content})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.content}
            if message.tool_calls:
                # Arguments go back exactly as the model wrote them, even when not valid JSON.
                entry["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            elif message.content is None:
                entry["content"] = ""  # the API refuses an assistant message with neither
            out.append(entry)
        elif isinstance(message, ToolResult):
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
            )
    return out


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
        },
    }


def provider_error(error: openai.OpenAIError, *, timeout_seconds: float) -> ApplicationError:
    """The one place an SDK error becomes retryable (transient) or run-ending (a refusal)."""
    if isinstance(error, openai.APITimeoutError):
        return timeout_error(PROVIDER, timeout_seconds)
    if isinstance(error, openai.APIConnectionError):
        return connection_error(PROVIDER, error.__cause__)
    if not isinstance(error, openai.APIStatusError):
        return AgentProviderError(f"OpenAI client error: {error}")
    return status_error(
        PROVIDER,
        error.status_code,
        provider_message(error.body, error.message),  # the SDK has unwrapped {"error": ...}
        headers=error.response.headers,
        request_id=error.request_id,
        key_variable="OPENAI_API_KEY",
        base_url_variable="OPENAI_BASE_URL",
    )
