"""The model providers, each declared once: its name, the model it defaults to, the variable its
key comes from, whether its calls have a queue of their own (admitted under its limits),
whether it streams, and the reasoning efforts it takes.

Everything else derives from this table: the run input's `Provider` field (workflows/inputs.py),
the model-call queues (activities/admission.py, serving/plugin.py), the CLI's choices and
defaults, and the adapters (activities/model_call.py), which tests/test_providers_catalogue.py
holds to cover every provider here and no other. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Provider = Literal["scripted", "openai", "openai-responses", "anthropic"]
"""`openai` is Chat Completions (OpenAI and OpenAI-compatible servers); `openai-responses` is
OpenAI's Responses API, stateless, with encrypted reasoning (docs/providers.md). A Literal, so
that a run's input is checked against it; `CATALOGUE` must name the same (a test holds it)."""


@dataclass(frozen=True)
class ProviderFacts:
    default_model: str
    key_variable: str | None
    """Where the provider's key comes from; None for the scripted model, which has none."""
    chosen_by_its_key: bool
    """The CLI picks this provider when its key is set and none is named (the first such)."""
    admitted: bool
    """Its model calls go to a queue of their own, `<queue>-model-<provider>`, admitted under
    its concurrency and rate limits (docs/admission.md); the scripted model's stay on the run's."""
    streams: bool
    reasoning_efforts: tuple[str, ...] = ()
    """The efforts it takes, when it is a reasoning model's API (Anthropic's is
    `output_config.effort`)."""


CATALOGUE: dict[Provider, ProviderFacts] = {
    "scripted": ProviderFacts(
        # Only a label, for a user's script; the demo names itself (demo/script.py).
        default_model="scripted",
        key_variable=None,
        chosen_by_its_key=False,
        admitted=False,
        streams=False,
    ),
    "openai": ProviderFacts(
        default_model="gpt-4o-mini",
        key_variable="OPENAI_API_KEY",
        chosen_by_its_key=True,
        admitted=True,
        streams=True,
    ),
    "anthropic": ProviderFacts(
        default_model="claude-sonnet-4-6",
        key_variable="ANTHROPIC_API_KEY",
        chosen_by_its_key=True,
        admitted=True,
        streams=True,
        reasoning_efforts=("low", "medium", "high", "xhigh", "max"),
    ),
    "openai-responses": ProviderFacts(
        default_model="gpt-5-mini",
        key_variable="OPENAI_API_KEY",
        chosen_by_its_key=False,
        admitted=True,
        streams=True,
        reasoning_efforts=("none", "minimal", "low", "medium", "high", "xhigh"),
    ),
}

PROVIDERS: tuple[Provider, ...] = tuple(CATALOGUE)
ADMITTED_PROVIDERS: tuple[Provider, ...] = tuple(p for p, f in CATALOGUE.items() if f.admitted)
STREAMING_PROVIDERS: tuple[Provider, ...] = tuple(p for p, f in CATALOGUE.items() if f.streams)
REASONING_EFFORTS: dict[str, tuple[str, ...]] = {
    p: f.reasoning_efforts for p, f in CATALOGUE.items() if f.reasoning_efforts
}
KEYED_PROVIDERS: dict[Provider, str] = {
    p: f.key_variable for p, f in CATALOGUE.items() if f.chosen_by_its_key and f.key_variable
}
"""The providers the CLI picks by their key, in order, with the variable each is picked by."""

assert set(get_args(Provider)) == set(CATALOGUE), "Provider and CATALOGUE name other providers"
