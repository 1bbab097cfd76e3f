"""A durable LLM agent loop on Temporal: every model call and every tool call an activity.

The names an application needs, from one import:

    from durable_agent import AgentClient, AgentInput, AgentPlugin, tool

- `AgentPlugin` and its `Stores`, `McpConfig`, `Admission`: the agent in the app's own Temporal
  client and worker (`plugins=[...]`).
- `AgentClient`, `AgentRun` and their errors: start, steer and read runs; `waiting_runs` and
  `label_stats` across runs; `evaluate`, and `ForkError` (docs/client.md, docs/debugging.md).
- `tool`, `callback_tool`, `ToolError`, `current_call`, `CompensationInput`, `RetrySettings`,
  `register_toolkit`, `Toolkit`: the app's tools (docs/tools.md, docs/side-effects.md);
  `approval_predicate`, calls that run without asking (docs/people-in-the-loop.md);
  `guardrail`, `GuardrailVerdict`, `GuardrailContext`, `GuardrailPolicy`: checks of what comes
  in, goes out and tools hand back (docs/guardrails.md).
- `AgentInput`, `AgentResult`, `Limits`, `ModelSettings`, `ToolApprovalPolicy`, ...: the run's
  data; `AgentWorkflow`, for a workflow that starts runs as children; the `Agent...` errors.

Every name an app's code writes is here; the modules behind them are the package's own
business, and may move (tests/test_docs_names.py keeps the docs to that).

Each name is defined in the subpackage of its concern (docs/architecture.md) and listed once,
in __init__.pyi, which type checkers read and lazy_loader attaches: a name's module is imported
when the name is first used. Lazy on purpose: the workflow sandbox imports this package afresh
for every run (it is the parent of durable_agent.workflows), and the client's and the plugin's
imports have no place there; and a client process loads no provider SDK
(tests/test_architecture.py).
"""

import pkgutil

import lazy_loader

# In a checkout this folder holds the face alone, and it shadows the installed package wherever
# the checkout is the current directory or a script's (`python starter.py`, `python -m pytest`).
# The rest of the package is then the editable install's, laid out as a tree of links on
# sys.path (pyproject.toml, [tool.distutils.editable_wheel]). Installed, this folder is the
# whole package, and nothing is added.
__path__ = pkgutil.extend_path(__path__, __name__)
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
