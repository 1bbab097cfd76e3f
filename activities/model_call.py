"""The model activity: one call to the configured provider per loop step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import activity

from activities import pricing, telemetry
from activities._heartbeat import heartbeating
from activities.providers import anthropic_provider, openai_provider, scripted
from workflows.errors import AgentConfigurationError
from workflows.models import ModelRequest, ModelResponse

Provider = Callable[[ModelRequest], Awaitable[ModelResponse]]

PROVIDERS: dict[str, Provider] = {
    "scripted": scripted.complete,
    "openai": openai_provider.complete,
    "anthropic": anthropic_provider.complete,
}


@activity.defn(name="call_model")
async def call_model(request: ModelRequest) -> ModelResponse:
    """Make one model call. Errors a retry can fix are raised retryable; the rest end the run.

    The call's cost is priced here, from the run's own price or the price table, so that the
    workflow only ever adds up figures recorded in its history.
    """
    settings = request.settings
    provider = PROVIDERS.get(settings.provider)
    if provider is None:
        raise AgentConfigurationError(f"unknown model provider {settings.provider!r}")
    with telemetry.chat_span(request) as span:
        async with heartbeating():
            response = await provider(request)
        span.record(response)
    price = settings.price or pricing.price_for(response.model) or pricing.price_for(settings.model)
    usage = response.usage.model_copy(update={"cost_usd": pricing.cost_usd(response.usage, price)})
    return response.model_copy(update={"usage": usage, "attempt": activity.info().attempt})
