"""The deterministic side: the workflow, the modules of its loop, and the data it passes around.

No clock but the workflow's, no I/O, no provider SDK: the sandbox passes this package through.
The workflow is `agent.AgentWorkflow`; each other module is one concern, and its docstring states
its rule (docs/architecture.md)."""

from __future__ import annotations

if not __name__.startswith("durable_agent."):
    # This folder imported by a bare name from the checkout would load a second copy of each
    # module (a `@tool` registered through it would register nowhere).
    raise ImportError(f"this folder is durable_agent.{__name__}: import durable_agent.{__name__}")
