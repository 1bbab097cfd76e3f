"""sandbox_runner's instance answers the SDK's questions about payloads as the SDK's own does.

For each payload the SDK asks the sandboxed instance for its serialization context and its
external-store context; sandbox_runner._Instance looks both up directly instead of through the
sandbox's importer. Here every answer it gives during real runs is checked against the one the
SDK's own `_Instance` gives at the same moment: for the run itself, its activities, a local
activity, and a sub-agent's child workflow.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from temporalio.client import Client
from temporalio.converter import ActivitySerializationContext, WorkflowSerializationContext
from temporalio.worker.workflow_sandbox import _runner as sdk

from durable_agent.serving import sandbox_runner
from durable_agent.serving.worker import build_worker
from durable_agent.workflows.agent import AgentWorkflow
from tests.helpers import TEST_WORKER_OPTIONS, call, scripted_input, turn
from tests.test_sub_agents import child_model

answers: list[tuple[str, Any, Any]] = []


fresh_modules: set[str] = set()


class _Checked(sandbox_runner._Instance):
    def activate(self, act: Any) -> Any:
        completion = super().activate(act)
        # Proxies of restricted modules exist only for modules the sandbox imports itself.
        modules = self.importer.new_modules
        fresh_modules.update(n for n, m in modules.items() if sys.modules.get(n) is not m)
        return completion

    def get_serialization_context(self, command_info: Any) -> Any:
        ours = super().get_serialization_context(command_info)
        answers.append(
            ("context", ours, sdk._Instance.get_serialization_context(self, command_info))
        )
        return ours

    def get_external_store_context(self, command_info: Any) -> Any:
        ours = super().get_external_store_context(command_info)
        theirs = sdk._Instance.get_external_store_context(self, command_info)
        answers.append(("store", ours, theirs))
        return ours


class _CheckedRunner(sandbox_runner.AgentSandboxRunner):
    def create_instance(self, det: Any) -> Any:
        return _Checked(det, self.runner_class, self.restrictions)


async def test_every_context_is_the_one_the_sdk_gives(client: Client, task_queue: str) -> None:
    answers.clear()
    fresh_modules.clear()
    key = f"k-{uuid.uuid4().hex[:6]}"
    child = child_model(turn(call("count_me", key=f"{key}-c")), turn(text="child done"))
    script = [
        turn(call("count_me", key=f"{key}-1"), call("local_lookup", key=f"{key}-2")),
        turn(call("delegate", task="count once", tools=["count_me"])),
        turn(text="done"),
    ]
    agent_input = scripted_input(
        script, tools=["count_me", "local_lookup"], sub_agents=True, sub_agent_model=child
    )
    runner = _CheckedRunner(restrictions=sandbox_runner.WORKFLOW_RUNNER.restrictions)
    async with build_worker(client, task_queue, workflow_runner=runner, **TEST_WORKER_OPTIONS):
        result = await client.execute_workflow(
            AgentWorkflow.run, agent_input, id=f"test-{uuid.uuid4()}", task_queue=task_queue
        )
    assert result.answer == "done"
    assert [(kind, ours) for kind, ours, theirs in answers if ours != theirs] == []
    contexts = [ours for kind, ours, _ in answers if kind == "context"]
    activity_types = {
        c.activity_type for c in contexts if isinstance(c, ActivitySerializationContext)
    }
    assert {"call_model", "count_me"} <= activity_types, activity_types
    assert any(c.is_local for c in contexts if isinstance(c, ActivitySerializationContext))
    child_ids = {c.workflow_id for c in contexts if isinstance(c, WorkflowSerializationContext)}
    assert any(workflow_id.endswith("/call_2_1") for workflow_id in child_ids), child_ids
    assert any(kind == "store" for kind, _, _ in answers)
    # So the builtins isinstance and issubclass need no unwrapping of proxies.
    assert fresh_modules == {"__main__"}


def test_each_snippet_the_sandbox_runs_is_compiled_once() -> None:
    code = "x = 1\n"
    assert sandbox_runner._compiled(code) is sandbox_runner._compiled(code)
