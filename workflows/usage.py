"""What a model call spent: its tokens as the provider reported them, and their cost.

A leaf module of the run's data: the state, the events, activity results and the providers all
count in it, and it imports nothing of the project but the bounds. Pure data.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from .bounds import Recorded, RecordedAmount


class Usage(BaseModel):
    """Tokens as the provider reported them, in one neutral shape for every provider."""

    input_tokens: Recorded = 0
    """Every input token of the call, those read from or written to a cache included."""
    output_tokens: Recorded = 0
    cached_input_tokens: Recorded = 0
    """Input tokens read from the provider's prompt cache."""
    cache_write_tokens: Recorded = 0
    """Input tokens written to the prompt cache (Anthropic bills them above the input rate)."""
    reasoning_tokens: Recorded = Field(default=0, exclude_if=lambda tokens: not tokens)
    """Output tokens the model spent reasoning, as the provider reports them: a part of
    output_tokens (and priced with them), never on top. Left out of the JSON when 0, so runs
    without reasoning keep the history bytes they had."""
    cost_usd: RecordedAmount | None = 0.0
    """None when a call's model has no price: an unknown cost is not a zero cost."""

    def __add__(self, other: Usage) -> Usage:
        cost = (
            None
            if self.cost_usd is None or other.cost_usd is None
            else round(self.cost_usd + other.cost_usd, 10)
        )
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost_usd=cost,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
