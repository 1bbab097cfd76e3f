"""The model a run calls, and how: `ModelSettings` (the provider, its model, the limits of one
call, reasoning, streaming, a price of its own), and the scripted model's replies for tests and
demos (`ScriptedTurn`). Part of the run's input (inputs.py takes them from here); pure data, the
workflow's wire format: add fields with defaults, rename none."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .bounds import Delay, Dollars, Seconds, Tokens
from .providers import CATALOGUE, REASONING_EFFORTS, Provider
from .specs import RetrySettings
from .usage import Usage


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(frozen=True)

    input: Dollars
    cached_input: Dollars
    cache_write: Dollars = 0.0
    output: Dollars


class ScriptedCall(BaseModel):
    name: str
    arguments: dict[str, Any] | str = {}
    """An object, or a raw text to play a model that writes invalid JSON."""
    id: str | None = None
    """Defaults to a deterministic id from the turn and position."""


class ScriptedTurn(BaseModel):
    """One reply of the scripted model."""

    text: str | None = None
    """Reply text. `{last_tool_result}` is replaced by the newest tool result's content, and
    `{last_tool_result.key}` by one key of it when it is a JSON object."""
    calls: list[ScriptedCall] = []
    expect: str | None = None
    """A text the messages since the model's previous reply must contain; the scripted model
    fails the run (non-retryably) when they do not, so a test sees where it left the script."""
    usage: Usage | None = None
    """Reported usage; by default input is estimated from the request and output from the reply."""
    delay_seconds: Delay = 0.0
    """How long the scripted model takes to reply: a real model's latency, for benchmarks."""


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


MIN_THINKING_BUDGET = 1024
"""Anthropic's smallest `budget_tokens`."""


class ModelSettings(BaseModel):
    provider: Provider = "scripted"
    model: str = Field(default_factory=lambda given: CATALOGUE[given["provider"]].default_model)
    """The model's name, as its provider knows it; unset, the provider's default
    (workflows/providers.py): `scripted` for the scripted provider, whose name is only a label
    (the demo names itself `scripted-demo`)."""
    script: list[ScriptedTurn] = []
    """The scripted provider's conversation (ignored by real providers)."""
    timeout_seconds: Seconds = 120.0
    retry: RetrySettings = RetrySettings(maximum_attempts=5)
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    """0 to 2 (OpenAI's range; Anthropic's is 0 to 1, and it refuses more)."""
    max_output_tokens: Tokens | None = None
    """Required by Anthropic; defaults to 4096 there."""
    price: Price | None = None
    """Overrides the price table for this run's model."""
    thinking_budget_tokens: Tokens | None = Field(default=None, exclude_if=lambda v: v is None)
    """Anthropic extended thinking: the tokens the model may think for before it answers (at
    least 1024, and less than max_output_tokens; with no max_output_tokens the call allows the
    budget plus 4096). Its thinking blocks are kept, signed, and sent back."""
    adaptive_thinking: bool = Field(default=False, exclude_if=lambda v: not v)
    """Anthropic adaptive thinking: the model decides whether and how much to think (models
    that offer it). Not with thinking_budget_tokens."""
    reasoning_effort: ReasoningEffort | None = Field(default=None, exclude_if=lambda v: v is None)
    """How hard a reasoning model thinks: `reasoning.effort` for openai-responses (none,
    minimal, low, medium, high, xhigh), `output_config.effort` for anthropic (low, medium,
    high, xhigh, max). (The reasoning settings are left out of the JSON when unset, so a run
    without them keeps the history bytes it had.)"""
    stream: bool = Field(default=False, exclude_if=lambda v: not v)
    """Use the provider's streaming API: the text (and reasoning summaries) as the model writes
    them reach `AgentRun.deltas()` through the model activity's heartbeats, never the history;
    the transcript gets the assembled message, as without streaming. The CLI turns it on at a
    terminal. (The scripted model does not stream.)"""

    @model_validator(mode="after")
    def _reasoning_settings_fit(self) -> ModelSettings:
        # Refused here, where the run is built, rather than as the provider's 400 at step 1.
        budget = self.thinking_budget_tokens
        thinking = budget is not None or self.adaptive_thinking
        if thinking and self.provider != "anthropic":
            raise ValueError(
                f"thinking_budget_tokens and adaptive_thinking are Anthropic's (provider is "
                f"{self.provider!r}); OpenAI reasoning models take reasoning_effort with "
                "provider 'openai-responses'"
            )
        if budget is not None:
            if self.adaptive_thinking:
                raise ValueError("give thinking_budget_tokens or adaptive_thinking, not both")
            if budget < MIN_THINKING_BUDGET:
                raise ValueError(
                    f"thinking_budget_tokens={budget}: Anthropic needs at least "
                    f"{MIN_THINKING_BUDGET}"
                )
            if self.max_output_tokens is not None and self.max_output_tokens <= budget:
                raise ValueError(
                    f"max_output_tokens={self.max_output_tokens} must be greater than "
                    f"thinking_budget_tokens={budget}: thinking counts against max_tokens"
                )
        if thinking and self.temperature not in (None, 1.0):
            raise ValueError(
                f"temperature={self.temperature:g} cannot be set with Anthropic thinking (only "
                "1, the default, is allowed): leave temperature unset"
            )
        effort = self.reasoning_effort
        if effort is not None:
            allowed = REASONING_EFFORTS.get(self.provider)
            if allowed is None:
                raise ValueError(
                    f"reasoning_effort is for provider 'openai-responses' or 'anthropic' "
                    f"(provider is {self.provider!r})"
                )
            if effort not in allowed:
                raise ValueError(
                    f"reasoning_effort={effort!r} is not one that {self.provider} takes: "
                    + ", ".join(allowed)
                )
            reasoning = self.provider == "openai-responses" and effort != "none"
            if reasoning and self.temperature is not None:
                raise ValueError(
                    "temperature cannot be set with reasoning_effort: OpenAI's reasoning "
                    "models refuse it (reasoning_effort='none' allows it on models that "
                    "offer it)"
                )
        return self
