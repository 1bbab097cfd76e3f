"""A module of tools for tests/test_plugin.py: what one app's plugin serves."""

from __future__ import annotations

from durable_agent import tool
from durable_agent.activities.toolkits import Toolkit


@tool
def alpha_lookup(key: str) -> str:
    """Look a key up in A's data."""
    return f"A has {key}"


def search(term: str) -> str:
    """Search A's catalogue."""
    return f"A found {term}"


SEARCH = Toolkit([search])
"""A toolkit whose tool is named `search`, as B's is: two plugins may each serve their own."""
