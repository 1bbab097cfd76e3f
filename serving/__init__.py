"""What serves runs: `AgentPlugin` (plugin.py) for an app's own worker and client, the project's
worker builder, connector and replayer (worker.py), an embedded dev server (dev_server.py), and
the workflow sandbox's runner (sandbox_runner.py)."""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
