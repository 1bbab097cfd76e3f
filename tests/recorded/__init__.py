"""Response bodies recorded from the real OpenAI and Anthropic APIs by other projects, each file
with its source (README.md): what the fakes answer with when a test must meet the real thing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


def load(name: str) -> dict[str, Any]:
    """A fixture whole: its `source`, its `responses` in the order recorded, and any `requests`."""
    data: dict[str, Any] = json.loads((HERE / f"{name}.json").read_text())
    return data


def responses(name: str) -> list[dict[str, Any]]:
    """The recorded response bodies of fixture `name`, fresh copies, in the order recorded."""
    bodies: list[dict[str, Any]] = load(name)["responses"]
    return bodies
