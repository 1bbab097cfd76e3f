"""The app-facing side of runs: `AgentClient` and `AgentRun` (agent_client.py), which start,
steer and read runs from an app's own code, and forking.py, which reads a run's history to fork
it, diff two runs or evaluate a model on recorded ones. No provider SDK is imported here."""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
