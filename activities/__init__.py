"""The side that does I/O: the model call and its providers, tools and toolkits, MCP servers, the
stores, telemetry. Nothing here is imported by workflows/; the workflow calls activities by name.

Importing a module here must not load a provider SDK unless it calls a model
(activities/model_call.py): a client imports activities.telemetry."""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
