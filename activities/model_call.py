"""The model activity: one call to the configured provider per loop step.

Each call goes through its provider's gate on this worker first (activities/admission.py): the
model's own limits, and the hold of a `retry-after` that an earlier call of the provider got."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..workflows.activity_io import ModelRequest, ModelResponse
from ..workflows.errors import AgentConfigurationError
from ..workflows.history import CONTENT_MIN_CHARS, STORE_MISS, content_ref
from ..workflows.transcript import Message
from . import admission, message_store, pricing, progress, telemetry
from ._heartbeat import heartbeating
from .oversized_reply import bounded_reply
from .providers import (
    _streaming,
    anthropic_provider,
    openai_provider,
    openai_responses_provider,
    scripted,
)

Provider = Callable[[ModelRequest], Awaitable[ModelResponse]]

STREAM_HEARTBEAT_THROTTLE = _streaming.HEARTBEAT_THROTTLE
"""The provider workers' `max_heartbeat_throttle_interval`: a streaming call's progress, which
rides on its heartbeats, is sent at most this often (the deltas' batch)."""

ADAPTERS: dict[str, Provider] = {
    "scripted": scripted.complete,
    "openai": openai_provider.complete,
    "openai-responses": openai_responses_provider.complete,
    "anthropic": anthropic_provider.complete,
}


def _resolved(request: ModelRequest) -> ModelRequest:
    """The request with what it names by reference filled in from the worker's store."""
    update: dict[str, object] = {
        "prefix_ref": None,
        "prefix_count": 0,
        "tools_ref": None,
        "script_ref": None,
    }
    if request.prefix_ref is not None:
        prefix = message_store.resolve_prefix(request.prefix_ref, request.prefix_count)
        if prefix is None:
            raise _miss(f"messages {request.prefix_ref} ({request.prefix_count})")
        update["messages"] = [*prefix, *_with_contents(request)]
    elif request.content_refs:
        update["messages"] = _with_contents(request)
    update["content_refs"] = {}
    if request.tools_ref is not None:
        tools = message_store.resolve_tools(request.tools_ref)
        if tools is None:
            raise _miss(f"tool list {request.tools_ref}")
        update["tools"] = tools
    if request.script_ref is not None:
        script = message_store.resolve_script(request.script_ref)
        if script is None:
            raise _miss(f"script {request.script_ref}")
        update["settings"] = request.settings.model_copy(update={"script": script})
    return request.model_copy(update=update)


def _with_contents(request: ModelRequest) -> list[Message]:
    messages = list(request.messages)
    for position, ref in request.content_refs.items():
        content = message_store.message_store().get_blob(ref)
        if content is None:
            raise _miss(f"content {ref}")
        messages[position] = messages[position].model_copy(update={"content": content})
    return messages


def _miss(what: str) -> ApplicationError:
    # Not retried: the workflow answers a miss by sending the whole request.
    return ApplicationError(
        f"this worker's message store lacks {what}", type=STORE_MISS, non_retryable=True
    )


def model_call(gates: admission.Gates) -> Callable[[ModelRequest], Awaitable[ModelResponse]]:
    """The `call_model` activity, admitting each call at `gates` (a plugin's own)."""

    @activity.defn(name="call_model")
    async def call_model(request: ModelRequest) -> ModelResponse:
        """Make one model call. Errors a retry can fix are raised retryable; the rest end the run.

        The call's cost is priced here, from the run's own price or the price table, so that the
        workflow only ever adds up figures recorded in its history.
        """
        await progress.report_retry(request.step, f"model call ({request.settings.model})")
        named = request
        request = _resolved(request)
        message_store.remember(named, request)
        settings = request.settings
        provider = ADAPTERS.get(settings.provider)
        if provider is None:
            raise AgentConfigurationError(f"unknown model provider {settings.provider!r}")
        prices = pricing.price_table()  # a price file that cannot be used fails before a paid call
        attempt = activity.info().attempt
        try:
            with _streaming.publishing(request, attempt) as publisher:
                beat_with = publisher.heartbeat if publisher is not None else None
                async with (
                    heartbeating(beat_with),
                    gates.admitted(settings.provider, settings.model),
                ):
                    with telemetry.chat_span(request) as span:
                        response = await provider(request)
                        span.record(response)
        except Exception as error:
            activity.logger.warning(
                "step %d: %s call to %s failed (attempt %d): %s",
                request.step,
                settings.provider,
                settings.model,
                activity.info().attempt,
                error,
            )
            raise
        if response.reasoning_left_out:
            # Also in the step's record (StepRecord.reasoning_left_out): the trace says so.
            activity.logger.info(
                "step %d: %d reasoning parts of the transcript left out of the %s call: made by "
                "another provider, or refused by this call's settings",
                request.step,
                response.reasoning_left_out,
                settings.provider,
            )
        price = (
            settings.price
            or pricing.price_for(response.model, prices)
            or pricing.price_for(settings.model, prices)
        )
        usage = response.usage.model_copy(
            update={"cost_usd": pricing.cost_usd(response.usage, price)}
        )
        # Paid for: a reply too large to report is cut to fit rather than failed and paid again.
        reply = bounded_reply(
            response.model_copy(update={"usage": usage, "attempt": activity.info().attempt})
        )
        text = reply.message.content or ""
        if request.purpose == "step" and len(text) >= CONTENT_MIN_CHARS:
            # The reply goes into the history as this activity's result; a run with linear
            # history names its text in the next call (model_gateway), so it is kept here.
            message_store.message_store().put_blob(content_ref(text), text)
        return reply

    return call_model


call_model = model_call(admission.Gates())
"""The activity with gates of its own: for a worker built without AgentPlugin, and tests."""
