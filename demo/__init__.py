"""The offline demo: a support desk's tools over a SQLite file (tools.py: orders, customers,
tracking, refunds, emails, each change with its undo) and the scripted conversation that drives
them (script.py). Shipped so that `durable-agent` runs the demo from an installed project; a
worker serves these tools only when it is given none of its own."""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
