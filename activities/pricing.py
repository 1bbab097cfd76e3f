"""What a model call costs: a price table per model, shipped and overridable.

Prices are US dollars per million tokens. The shipped table holds list prices for common models
as of PRICES_AS_OF; a provider's price change, or a negotiated rate, goes in a JSON file named by
$AGENT_PRICES (`{"model": {"input": 2.5, "cached_input": 1.25, "cache_write": 0, "output": 10}}`)
or in a run's `ModelSettings.price`. Models are matched by exact name, or as a dated snapshot or
`-latest` alias of a known name ("gpt-4o-mini-2024-07-18" is priced as "gpt-4o-mini"), and no
other way: "gpt-5.6-sol" is another model than "gpt-5", priced otherwise (and billed for its
cache writes), "o3-mini" costs half of "o3" and "claude-opus-4-8" a third of "claude-opus-4", so
each has no price here rather than a wrong one.

Cost is computed in the model activity, where reading the file is allowed; the workflow only adds
up the figures the activities returned, so budgets stay deterministic. The file is read and checked
as a worker starts (`check_worker`), and again by a model call before it is made: one that cannot
be used (missing, not JSON, a price with a field it does not know or a negative rate) is
AgentConfigurationError, which stops the worker from starting, or fails the run at once, rather
than after a paid call that each retry would pay for again.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from ..workflows.errors import AgentConfigurationError
from ..workflows.model_settings import Price
from ..workflows.usage import Usage

PRICES_AS_OF = "2026-11"

OPENAI_CACHE_WRITES = (
    "https://developers.openai.com/api/docs/guides/prompt-caching (as quoted 2026-07 to 2026-09): "
    "no cache-write fee before GPT-5.6; from GPT-5.6, writes at 1.25x input (cache_write_tokens)"
)
"""The source of the OpenAI cache-write prices below, and its date: the guide as other projects
quoted it in July to September 2026 (the page itself could not be read for this table)."""

_p = Price
SHIPPED_PRICES: dict[str, Price] = {
    # OpenAI: cached input is billed at the cached rate. Cache writes: 0 on every model below,
    # all from before GPT-5.6 (OPENAI_CACHE_WRITES). GPT-5.6 and later write at 1.25x input and
    # are not listed: their list prices moved more than once since July 2026, and could not be
    # checked against OpenAI's pricing page for this table; price them in $AGENT_PRICES.
    "gpt-5": _p(input=1.25, cached_input=0.125, cache_write=0.0, output=10.0),
    "gpt-5-mini": _p(input=0.25, cached_input=0.025, cache_write=0.0, output=2.0),
    "gpt-5-nano": _p(input=0.05, cached_input=0.005, cache_write=0.0, output=0.40),
    "gpt-4.1": _p(input=2.0, cached_input=0.50, cache_write=0.0, output=8.0),
    "gpt-4.1-mini": _p(input=0.40, cached_input=0.10, cache_write=0.0, output=1.60),
    "gpt-4.1-nano": _p(input=0.10, cached_input=0.025, cache_write=0.0, output=0.40),
    "gpt-4o": _p(input=2.50, cached_input=1.25, cache_write=0.0, output=10.0),
    "gpt-4o-mini": _p(input=0.15, cached_input=0.075, cache_write=0.0, output=0.60),
    "o3": _p(input=2.0, cached_input=0.50, cache_write=0.0, output=8.0),
    "o3-mini": _p(input=1.10, cached_input=0.55, cache_write=0.0, output=4.40),
    "o4-mini": _p(input=1.10, cached_input=0.275, cache_write=0.0, output=4.40),
    # Anthropic: cache reads at 0.1x input, 5-minute cache writes at 1.25x input.
    "claude-opus-4-6": _p(input=5.0, cached_input=0.50, cache_write=6.25, output=25.0),
    "claude-sonnet-4-6": _p(input=3.0, cached_input=0.30, cache_write=3.75, output=15.0),
    "claude-opus-4-5": _p(input=5.0, cached_input=0.50, cache_write=6.25, output=25.0),
    "claude-opus-4-1": _p(input=15.0, cached_input=1.50, cache_write=18.75, output=75.0),
    "claude-opus-4": _p(input=15.0, cached_input=1.50, cache_write=18.75, output=75.0),
    "claude-opus-4-0": _p(input=15.0, cached_input=1.50, cache_write=18.75, output=75.0),
    "claude-sonnet-4-5": _p(input=3.0, cached_input=0.30, cache_write=3.75, output=15.0),
    "claude-sonnet-4": _p(input=3.0, cached_input=0.30, cache_write=3.75, output=15.0),
    "claude-sonnet-4-0": _p(input=3.0, cached_input=0.30, cache_write=3.75, output=15.0),
    "claude-haiku-4-5": _p(input=1.0, cached_input=0.10, cache_write=1.25, output=5.0),
    "claude-3-5-haiku": _p(input=0.80, cached_input=0.08, cache_write=1.0, output=4.0),
}


DEMO_PRICE = Price(input=1.0, cached_input=0.1, output=4.0)
"""MADE UP, for the offline demo only: the scripted model costs nothing, but with this price
(set by the CLI on the built-in demo's runs, in `ModelSettings.price`) a newcomer sees cost
wherever a real model's would appear: the progress lines, the result, the `status` query, the
run's page and the AgentCostUsd search attribute. It is no provider's price; the scripted
model's name is not in the price table, so other scripted runs stay unpriced."""


PRICES_VARIABLE = "AGENT_PRICES"


@cache
def _configured_prices(path: str) -> dict[str, Price]:
    """$AGENT_PRICES's table; AgentConfigurationError, naming the file and what is wrong, for
    one that cannot be used (a failed read is not cached: a fixed file is read again)."""
    where = f"${PRICES_VARIABLE} {path}"
    try:
        raw = json.loads(Path(path).read_bytes())
    except OSError as error:
        raise AgentConfigurationError(f"{where}: {error.strerror or error}") from None
    except ValueError as error:
        raise AgentConfigurationError(f"{where}: not JSON: {error}") from None
    if not isinstance(raw, dict):
        raise AgentConfigurationError(f"{where}: a JSON object of prices by model name")
    table = {}
    for model, price in raw.items():
        # A misspelt rate ("cache_wirte") would be a rate of 0, and bill too little.
        unknown = sorted(set(price) - set(Price.model_fields)) if isinstance(price, dict) else []
        if unknown:
            raise AgentConfigurationError(
                f"{where}: {model}: unknown field {unknown[0]!r} (the fields: "
                f"{', '.join(Price.model_fields)}, dollars per million tokens)"
            )
        try:
            table[model] = Price.model_validate(price)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            field = ".".join(str(part) for part in (model, *first["loc"]))
            raise AgentConfigurationError(f"{where}: {field}: {first['msg']}") from None
    return table


def price_table() -> dict[str, Price]:
    """The shipped prices, with those of $AGENT_PRICES (if set) taking precedence.
    AgentConfigurationError for a file that cannot be used."""
    path = os.environ.get(PRICES_VARIABLE)
    return {**SHIPPED_PRICES, **(_configured_prices(path) if path else {})}


_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)")
"""What a provider appends to a model's name for one of its snapshots, or its alias: Anthropic's
"-20250929" and "-latest", OpenAI's "-2024-11-20"."""


def price_for(model: str, table: dict[str, Price] | None = None) -> Price | None:
    table = price_table() if table is None else table
    if model in table:
        return table[model]
    # A snapshot of a known model is priced as it ("gpt-4o-2024-11-20"); any other name that
    # starts like one is another model ("o3-mini", "claude-opus-4-8"), unpriced, not mispriced.
    matches = [n for n in table if model.startswith(n) and _SNAPSHOT.fullmatch(model[len(n) :])]
    return table[max(matches, key=len)] if matches else None


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """The cost of one call; None when the model has no price."""
    if price is None:
        return None
    uncached = max(usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens, 0)
    total = (
        uncached * price.input
        + usage.cached_input_tokens * price.cached_input
        + usage.cache_write_tokens * price.cache_write
        + usage.output_tokens * price.output
    )
    return round(total / 1_000_000, 10)
