"""A provider is declared once (workflows/providers.py) and everything else derives from it: a
provider missed in one list used to fail nowhere."""

from __future__ import annotations

from typing import get_args

from durable_agent.activities import admission, model_call
from durable_agent.serving.plugin import AgentPlugin
from durable_agent.workflows.model_settings import ModelSettings
from durable_agent.workflows.providers import (
    ADMITTED_PROVIDERS,
    CATALOGUE,
    KEYED_PROVIDERS,
    REASONING_EFFORTS,
    Provider,
)


def test_every_provider_the_input_takes_is_in_the_catalogue_and_has_an_adapter() -> None:
    assert set(get_args(Provider)) == set(CATALOGUE)
    assert set(model_call.ADAPTERS) == set(CATALOGUE)
    for provider, facts in CATALOGUE.items():
        ModelSettings(provider=provider, model=facts.default_model)


def test_the_queues_the_limits_and_the_cli_derive_from_the_catalogue() -> None:
    assert AgentPlugin().providers == ADMITTED_PROVIDERS
    assert "scripted" not in ADMITTED_PROVIDERS and set(ADMITTED_PROVIDERS) < set(CATALOGUE)
    limits = admission.Admission.from_env({"AGENT_MODEL_CONCURRENCY_OPENAI_RESPONSES": "3"})
    assert limits.limits("openai-responses").concurrency == 3
    assert list(KEYED_PROVIDERS) == ["openai", "anthropic"]
    assert set(REASONING_EFFORTS) == {"anthropic", "openai-responses"}
