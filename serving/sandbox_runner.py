"""How the worker runs workflow code: `fast`, the SDK's sandbox with three of its costs taken
out (the default), or `stock`, the SDK's sandbox as it ships ($AGENT_SANDBOX; what the fast one
gives up: docs/architecture.md, "Two sandboxes, one setting").

- **The `workflows` package is passed through.** Its modules always were (workflows/agent.py says
  why); this adds agent.py itself, which the sandbox otherwise imports again, compiling its
  source, for every run it starts: a third of a one-step run's worker CPU here, where
  PYTHONDONTWRITEBYTECODE is set as in the Dockerfile. The only state a module of `workflows/`
  keeps is registry.py's, which the stock sandbox shares too; tests/test_determinism.py holds
  the package to the sandbox's rules, under the stock sandbox, instead.
- **A payload's serialization context is looked up directly.** For every payload of every
  activation and completion (three passes each way), the SDK asks the sandboxed instance which
  context the payload belongs to by compiling and running a two-line snippet under the sandbox's
  importer (temporalio 1.35, `workflow_sandbox/_runner.py`). The answer is a lookup in the
  instance's pending commands, in SDK code the sandbox passes through: `_Instance` below makes
  that lookup itself, and compiles each snippet it still runs once. A profile of a 500-step
  replay put 23% of its samples in those two questions (docs/performance.md).
  tests/test_sandbox_runner.py checks every answer against the SDK's own during real runs, and
  pyproject.toml pins temporalio to a minor release, so an SDK that moves this code fails there.
- **isinstance and issubclass are not wrapped.** The sandbox wraps both builtins during every
  activation to unwrap its proxies of restricted modules (`datetime`, `os`, ...), which exist
  only for modules it imports itself. It imports none here: everything the workflow uses is
  passed through.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from types import CodeType
from typing import Any, Literal, get_args

from temporalio.converter import SerializationContext
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker._command_aware_visitor import CommandInfo
from temporalio.worker._workflow_instance import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import (
    SandboxedWorkflowRunner,
    SandboxRestrictions,
    _runner as sandbox,
)
from temporalio.worker.workflow_sandbox._in_sandbox import InSandbox

from ..workflows.errors import AgentConfigurationError

PASSED_THROUGH = ("durable_agent.workflows",)


_UNPROXIED = ("isinstance", "issubclass")
"""The builtins the sandbox wraps only to unwrap its module proxies."""


@functools.lru_cache(maxsize=64)
def _compiled(code: str) -> CodeType:
    return compile(code, "<sandbox>", "exec")


class _Instance(sandbox._Instance):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # The sandbox wraps isinstance and issubclass, for every call during an activation, to
        # unwrap its proxies of restricted modules. With the package passed through it imports
        # none (tests/test_sandbox_runner.py checks), so the wrapper only costs: 7% of a replay.
        self.importer.restricted_builtins = [
            entry for entry in self.importer.restricted_builtins if entry[0] not in _UNPROXIED
        ]

    def _in_sandbox(self) -> InSandbox:
        in_sandbox: InSandbox = self.globals_and_locals["__temporal_in_sandbox"]  # type: ignore[assignment]
        return in_sandbox

    def get_serialization_context(
        self, command_info: CommandInfo | None
    ) -> SerializationContext | None:
        return self._in_sandbox().get_serialization_context(command_info)

    def get_external_store_context(
        self, command_info: CommandInfo | None
    ) -> StorageDriverStoreContext:
        return self._in_sandbox().get_external_store_context(command_info)

    def _run_code(self, code: str, **extra_globals: Any) -> None:
        # The SDK's own, given the code compiled once (exec compiles a str at every call).
        super()._run_code(_compiled(code), **extra_globals)  # type: ignore[arg-type]


class AgentSandboxRunner(SandboxedWorkflowRunner):
    """SandboxedWorkflowRunner, making the `_Instance` above."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Instance(det, self.runner_class, self.restrictions)


RESTRICTIONS = SandboxRestrictions.default.with_passthrough_modules(*PASSED_THROUGH)
"""The SDK's default restrictions, with the agent's deterministic modules passed through."""

STOCK_RUNNER = SandboxedWorkflowRunner(restrictions=RESTRICTIONS)
"""The SDK's own runner with the agent's modules passed through: what AgentPlugin gives a worker
that serves an app's workflows too (serving/plugin.py)."""

WORKFLOW_RUNNER = AgentSandboxRunner(restrictions=RESTRICTIONS)
"""The runner of the project's own workers and replayer (worker.build_worker, bench/replay.py):
`AgentPlugin(fast_sandbox=True)`."""


WorkerSandbox = Literal["fast", "stock"]
"""How the project's own worker and replayer run the workflow: `fast`, WORKFLOW_RUNNER above;
`stock`, the SDK's SandboxedWorkflowRunner as it ships, which imports every module of the loop
afresh for each run and restricts it (only workflows/registry.py is shared)."""

SANDBOX_VARIABLE = "AGENT_SANDBOX"


def sandbox_from_env(environ: Mapping[str, str] = os.environ) -> WorkerSandbox:
    """$AGENT_SANDBOX: `fast` (the default) or `stock`. Raises AgentConfigurationError for any
    other value."""
    value = environ.get(SANDBOX_VARIABLE, "").strip() or "fast"
    if value not in get_args(WorkerSandbox):
        raise AgentConfigurationError(
            f"{SANDBOX_VARIABLE}={value!r}: use fast (the default) or stock "
            "(the SDK's own sandbox; docs/architecture.md)"
        )
    return value  # type: ignore[return-value]
