"""Two side-effecting tools undone by one compensation (tests/test_compensation.py)."""

from __future__ import annotations

from durable_agent.activities.tools import tool
from durable_agent.workflows.state import CompensationInput

undone: list[tuple[str, str]] = []
"""What undo_note undid, by tool and text, in the order it ran."""


def undo_note(call: CompensationInput) -> str:
    """Remove the note a call wrote, whichever book it went in."""
    undone.append((call.tool, call.arguments["text"]))
    return "removed"


@tool(side_effects=True, compensation=undo_note)
def note_a(text: str) -> str:
    """Write a note in book A."""
    return f"a:{text}"


@tool(side_effects=True, compensation=undo_note)
def note_b(text: str) -> str:
    """Write a note in book B."""
    return f"b:{text}"
