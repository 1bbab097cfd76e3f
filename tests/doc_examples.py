"""A doc page's complete example, as the tests that check it read it: the section's text, and
its Python code run as a module of its own."""

from __future__ import annotations

import functools
import types
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADING = "\n## A complete example\n"


def section(page: str) -> str:
    """The page's section "A complete example", up to the next heading of its level."""
    return (DOCS / page).read_text().split(HEADING, 1)[1].split("\n## ", 1)[0]


@functools.cache
def example_module(page: str) -> types.ModuleType:
    """The section's first Python block, run as a module of its own. Once a process: the tools
    and guardrails it defines register once."""
    code = section(page).split("```python\n", 1)[1].split("```", 1)[0]
    module = types.ModuleType(page.removesuffix(".md").replace("-", "_") + "_example")
    exec(compile(code, str(DOCS / page), "exec"), module.__dict__)
    return module
