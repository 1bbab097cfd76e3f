"""How a provider's failure becomes a Temporal error, the same for every HTTP provider.

Each adapter keeps its SDK's exception classes to itself and hands the facts (status, the
provider's message, headers, request id) to the builders here, so the classification is one
decision made in one place:

- 408, 409, 429 and every 5xx, timeouts and connection errors are retryable
  (`ProviderTransientError`), honouring the server's `retry-after` up to MAX_RETRY_AFTER;
- every other 4xx ends the run (`AgentProviderError`) with the provider's own message, and for
  401/403 a hint naming the key variable;
- a reply that arrived but cannot be used (cut off at the output-token limit, empty, or not
  parseable) is retryable as `ProviderIncompleteReply`: the model retry policy bounds the attempts
  and the run then fails with that message.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import TypeVar

import httpx2
from temporalio.exceptions import ApplicationError

from ...workflows.errors import AgentProviderError

TRANSIENT_ERROR_TYPE = "ProviderTransientError"
"""`type` of the retryable errors: rate limits, overload, server errors, timeouts, no reply."""

INCOMPLETE_REPLY_TYPE = "ProviderIncompleteReply"
"""`type` of the retryable error for a reply that came back unusable (cut off, empty, garbled)."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx: request timeout, conflict (the API's "try again"), rate limit."""

MAX_RETRY_AFTER = timedelta(seconds=60)
"""A server-asked delay is honoured up to this; a longer one is cut to it."""


def is_retryable_status(status: int) -> bool:
    return status in RETRYABLE_STATUSES or status >= 500


def transient_error(message: str, *, next_retry_delay: timedelta | None = None) -> ApplicationError:
    return ApplicationError(
        message,
        type=TRANSIENT_ERROR_TYPE,
        non_retryable=False,
        next_retry_delay=next_retry_delay,
    )


def incomplete_reply(message: str) -> ApplicationError:
    return ApplicationError(message, type=INCOMPLETE_REPLY_TYPE, non_retryable=False)


def unreadable_reply(provider: str, model: str, error: BaseException) -> ApplicationError:
    """A reply the SDK could not decode: garbled JSON, or nesting past Python's recursion limit
    (`RecursionError`, which no SDK turns into its own error class)."""
    return incomplete_reply(
        f"{provider} sent a reply for model {model!r} that could not be read: "
        f"{type(error).__name__}: {str(error)[:300]}"
    )


def timeout_error(provider: str, timeout_seconds: float) -> ApplicationError:
    return transient_error(f"{provider} did not answer within {timeout_seconds:g}s")


def connection_error(provider: str, cause: BaseException | None) -> ApplicationError:
    # A reset connection often has an empty message (httpx's ReadError('')): name its type.
    detail = f": {str(cause) or type(cause).__name__}" if cause is not None else ""
    return transient_error(f"could not reach {provider}{detail}")


def status_error(
    provider: str,
    status: int,
    message: str,
    *,
    headers: Mapping[str, str],
    request_id: str | None = None,
    key_variable: str,
    base_url_variable: str,
) -> ApplicationError:
    """The error for an HTTP error status: retryable (with the server's delay) or run-ending."""
    text = f"{provider} returned HTTP {status}: {message}"
    if request_id:
        text += f" (request id {request_id})"
    if is_retryable_status(status):
        return transient_error(text, next_retry_delay=retry_after(headers))
    if status in (401, 403):
        text += (
            f"; check {key_variable} (is it valid, and allowed to use this model?)"
            f" and {base_url_variable}"
        )
    return AgentProviderError(text)


def provider_message(body: object, fallback: str) -> str:
    """The provider's own explanation from an error body: `{"error": {"message": ...}}` (the
    SDK may already have unwrapped the outer object), else the raw text, else `fallback`."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else None
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


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


def cut_off_reply(
    provider: str,
    model: str,
    max_output_tokens: int | None,
    *,
    in_tool_call: bool,
    has_text: bool,
) -> ApplicationError:
    """A reply stopped by the output-token limit: never a usable answer or a usable call."""
    limit = (
        f"max_output_tokens={max_output_tokens}"
        if max_output_tokens is not None
        else "max_output_tokens not set: the model's own limit"
    )
    where = (
        "in the middle of a tool call"
        if in_tool_call
        else "in the middle of its text"
        if has_text
        else "before it wrote anything"
    )
    return incomplete_reply(
        f"{provider} model {model!r}: the reply was cut off at the output-token limit "
        f"({limit}) {where}; raise max_output_tokens if this repeats"
    )


SdkError = TypeVar("SdkError", bound=Exception)


@contextmanager
def provider_failures(
    provider: str,
    model: str,
    sdk_error: type[SdkError],
    connection_failure: type[Exception],
    to_failure: Callable[[SdkError], ApplicationError],
) -> Iterator[None]:
    """The one mapping of a provider call's failures, for every adapter: a stream cut off
    half-way (which the SDKs do not wrap), the SDK's own errors (`to_failure`), and a body the
    SDK could not decode."""
    try:
        yield
    except httpx2.TransportError as error:
        raise connection_error(provider, error) from None
    except sdk_error as error:
        # httpx's frames on a connection error or timeout would push the attempt's failure past
        # the server's 4 KB limit, and the history would show "Failure exceeds size limit."
        # instead of its type: the message names the cause, so the chain is dropped.
        raise to_failure(error) from (None if isinstance(error, connection_failure) else error)
    except (ValueError, RecursionError) as error:  # the SDK decodes the body unguarded
        raise unreadable_reply(provider, model, error) from None
