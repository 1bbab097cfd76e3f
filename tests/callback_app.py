"""An app's callback tool (`--tools tests.callback_app`), for tests/test_callback_tools.py: its
body runs on the client, so the worker that serves it has no activity for it."""

from __future__ import annotations

from pydantic import BaseModel

from durable_agent import callback_tool


class Location(BaseModel):
    city: str
    accuracy_m: int


@callback_tool(timeout_seconds=60)
def user_location(precision: str = "city") -> Location:
    """Where the user's browser is.

    Args:
        precision: "city" or "street".
    """
    ...
