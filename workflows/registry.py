"""What the worker registers for the workflow to read: tool specs and approval predicates.

The one module of this package that the workflow imports passed through the sandbox, and the
only state of the package that outlives a run. `@tool` (activities/tools.py) and
`@approval_predicate` (approval.py) fill these when the app's modules are imported, outside any
sandbox; the workflow, imported afresh for each run under the SDK's own sandbox, reads them
here. Plain data only: specs as dicts, which tool_catalog.py validates into the run's own
classes, and the app's predicate functions. No code of the loop lives here, so the sandbox still
imports, and restricts, all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

tool_specs: dict[str, dict[str, Any]] = {}
"""Each registered tool's `ToolSpec.model_dump()`, by name."""

approval_predicates: dict[str, Callable[[str, dict[str, Any]], bool]] = {}
"""Each `@approval_predicate` function, by the name a run's policy gives."""
