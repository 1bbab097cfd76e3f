"""A scoring function for `starter.py eval --score tests.fork_scores:names_the_order`."""

from __future__ import annotations

from durable_agent.workflows.inputs import AgentResult


def names_the_order(original: AgentResult, fork: AgentResult) -> float:
    """1 when the fork's answer names the order the original's answer named, else 0; and half
    a point off when it took more steps."""
    order = "1042" if "1042" in original.answer else None
    if order is None or order not in fork.answer:
        return 0.0
    return 1.0 if fork.steps <= original.steps else 0.5
