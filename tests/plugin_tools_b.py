"""A module of tools for tests/test_plugin.py: what another app's plugin serves."""

from __future__ import annotations

from durable_agent import tool
from durable_agent.activities.toolkits import Toolkit


@tool
def beta_lookup(key: str) -> str:
    """Look a key up in B's data."""
    return f"B has {key}"


def search(term: str) -> str:
    """Search B's catalogue."""
    return f"B found {term}"


SEARCH = Toolkit([search])
