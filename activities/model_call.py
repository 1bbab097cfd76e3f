"""The model activity: one call to the configured provider per loop step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from temporalio import activity

from activities.providers import openai_provider, scripted
from workflows.errors import AgentConfigurationError
from workflows.models import ModelRequest, ModelResponse

Provider = Callable[[ModelRequest], Awaitable[ModelResponse]]

PROVIDERS: dict[str, Provider] = {
    "scripted": scripted.complete,
    "openai": openai_provider.complete,
}


@activity.defn(name="call_model")
async def call_model(request: ModelRequest) -> ModelResponse:
    """Make one model call. Errors a retry can fix are raised retryable; the rest end the run."""
    provider = PROVIDERS.get(request.settings.provider)
    if provider is None:
        raise AgentConfigurationError(f"unknown model provider {request.settings.provider!r}")
    return await provider(request)
