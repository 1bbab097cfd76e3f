"""OpenAI Chat Completions: one call per activity attempt, with the SDK's own retries off.

The key comes from OPENAI_API_KEY and the endpoint from OPENAI_BASE_URL (read by the SDK). A
client is built per call and closed after it, so nothing is bound to an event loop or created at
import time; the connection set-up is small beside a model call.

The request is built from the transcript alone, in a fixed order, so the same transcript always
gives the same request bytes and the provider's prompt cache can match the shared prefix.
"""

from __future__ import annotations

import email.utils
import math
import os
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageFunctionToolCall
from temporalio.exceptions import ApplicationError

from workflows.errors import AgentConfigurationError, AgentProviderError
from workflows.models import ModelRequest, ModelResponse, ToolSpec, Usage
from workflows.transcript import AssistantMessage, Message, ToolCall, ToolResult, UserMessage

TRANSIENT_ERROR_TYPE = "ProviderTransientError"
"""`type` of the retryable errors: rate limits, overload, server errors, timeouts, no reply."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx: request timeout, conflict (the API's "try again"), rate limit."""

MAX_RETRY_AFTER = timedelta(seconds=60)
"""A server-asked delay is honoured up to this; a longer one is cut to it."""


async def complete(request: ModelRequest) -> ModelResponse:
    """Make one Chat Completions call for `request` and map the reply back."""
    api_key = os.environ.get("OPENAI_API_KEY")
    if not api_key:
        raise AgentConfigurationError(
            "OPENAI_API_KEY is not set: export it in the worker's environment (and "
            "OPENAI_BASE_URL for an OpenAI-compatible endpoint), or run with provider='scripted'"
        )
    settings = request.settings
    params: dict[str, Any] = {
        "model": settings.model,
        "messages": to_openai_messages(request.system, request.messages),
    }
    if request.tools:
        params["tools"] = [_tool(spec) for spec in request.tools]
        params["parallel_tool_calls"] = True
    if settings.temperature is not None:
        params["temperature"] = settings.temperature
    if settings.max_output_tokens is not None:
        params["max_completion_tokens"] = settings.max_output_tokens
    try:
        async with openai.AsyncOpenAI(
            api_key=api_key, max_retries=0, timeout=settings.timeout_seconds
        ) as client:
            response = await client.chat.completions.create(**params)
    except openai.OpenAIError as error:
        raise provider_error(error, timeout_seconds=settings.timeout_seconds) from error

    if not response.choices:
        raise ApplicationError(
            f"OpenAI sent an empty reply (no choices) for model {settings.model!r}",
            type=TRANSIENT_ERROR_TYPE,
        )
    choice = response.choices[0]
    reply = choice.message
    calls = []
    for call in reply.tool_calls or ():
        if isinstance(call, ChatCompletionMessageFunctionToolCall):
            calls.append(
                ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
            )
        else:  # a custom (free-text) tool call; none is offered, but keep the pairing intact
            calls.append(ToolCall(id=call.id, name=call.custom.name, arguments=call.custom.input))
    usage = response.usage
    cached = (
        usage.prompt_tokens_details.cached_tokens if usage and usage.prompt_tokens_details else 0
    )
    return ModelResponse(
        # A refusal stands in for the text, so the loop sees why there is no answer.
        message=AssistantMessage(
            content=reply.content if reply.content is not None else reply.refusal,
            tool_calls=tuple(calls),
        ),
        usage=Usage(
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            cached_input_tokens=cached or 0,
        ),
        model=response.model,
        finish_reason=choice.finish_reason,
    )


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
        return ApplicationError(
            f"OpenAI did not answer within {timeout_seconds:g}s", type=TRANSIENT_ERROR_TYPE
        )
    if isinstance(error, openai.APIConnectionError):
        cause = f": {error.__cause__}" if error.__cause__ else ""
        return ApplicationError(f"could not reach OpenAI{cause}", type=TRANSIENT_ERROR_TYPE)
    if not isinstance(error, openai.APIStatusError):
        return AgentProviderError(f"OpenAI client error: {error}")
    status = error.status_code
    text = f"OpenAI returned HTTP {status}: {_provider_message(error)}"
    if error.request_id:
        text += f" (request id {error.request_id})"
    if status in RETRYABLE_STATUSES or status >= 500:
        return ApplicationError(
            text,
            type=TRANSIENT_ERROR_TYPE,
            non_retryable=False,
            next_retry_delay=retry_after(error.response.headers),
        )
    if status in (401, 403):
        text += (
            "; check OPENAI_API_KEY (is it valid, and allowed to use this model?)"
            " and OPENAI_BASE_URL"
        )
    return AgentProviderError(text)


def _provider_message(error: openai.APIStatusError) -> str:
    body = error.body  # the SDK has already unwrapped {"error": {...}}
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else None
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return error.message


def retry_after(headers: Mapping[str, str]) -> timedelta | None:
    """The delay the server asked for (retry-after-ms, else retry-after in seconds or as an
    HTTP date), capped at MAX_RETRY_AFTER; None when absent or not a sane positive delay."""
    seconds: float | None = None
    if (value := headers.get("retry-after-ms")) is not None:
        seconds = _number(value, scale=0.001)
    if seconds is None and (value := headers.get("retry-after")) is not None:
        seconds = _number(value, scale=1.0)
        if seconds is None:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                seconds = email.utils.mktime_tz(parsed) - time.time()
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        return None
    return min(timedelta(seconds=seconds), MAX_RETRY_AFTER)


def _number(value: str, *, scale: float) -> float | None:
    try:
        return float(value) * scale
    except ValueError:
        return None
