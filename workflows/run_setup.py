"""Run setup: what a run is given, settled before its first step.

Its tools (read once from the worker by the `resolve_tools` local activity and recorded in the
history, so replay never asks a worker's registry; runs from before that read the registry), and
the checks of its input that would otherwise fail it later, or wedge it: a valid, self-contained
output schema, and approval predicates the worker has. A run that fails here fails before step 1,
with the reason, and has paid for nothing.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import jsonschema
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

import workflows.approval as approval
import workflows.dispatch as dispatch
import workflows.tool_catalog as tool_catalog
from workflows.errors import FATAL_ERROR_TYPES, AgentConfigurationError, describe_failure
from workflows.models import AgentInput, RunTools, ToolSelection
from workflows.state import RunState
from workflows.versioning import Behaviours


async def settle(agent_input: AgentInput, state: RunState, behaviours: Behaviours) -> RunTools:
    """The run's tools, with its input checked; raises AgentConfigurationError."""
    if state.tools is None and behaviours.records_tool_specs:
        state.tools = await _recorded(agent_input.tools)
    if state.tools is not None:
        run_tools = tool_catalog.described(state.tools)
    else:
        try:
            run_tools = tool_catalog.for_run(agent_input.tools)
        except KeyError as error:
            raise AgentConfigurationError(f"the run asks for tools {error.args[0]}") from None
    _check_output_schema(agent_input, behaviours)
    if unknown := approval.unknown_predicates(agent_input.tool_approval):
        raise AgentConfigurationError(
            f"the run's approval policy names predicates that are not registered: {unknown}"
        )
    return run_tools


def _check_output_schema(agent_input: AgentInput, behaviours: Behaviours) -> None:
    schema = agent_input.output_schema
    if schema is None:
        return
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise AgentConfigurationError(
            f"output_schema is not a valid JSON schema: {error.message}"
        ) from None
    external = dispatch.external_refs(schema)
    if external and behaviours.bounded_sub_agents:
        # Checking finish's arguments would need to fetch them, which a workflow cannot: the
        # run would wedge at its answer.
        raise AgentConfigurationError(
            f"output_schema refers outside itself ($ref {', '.join(external)}); a workflow "
            "cannot fetch schemas: inline them under $defs"
        )


async def _recorded(names: list[str] | None) -> RunTools:
    try:
        return await workflow.execute_local_activity(
            tool_catalog.RESOLVE_TOOLS,
            ToolSelection(names=names),
            result_type=RunTools,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(
                maximum_attempts=3, non_retryable_error_types=FATAL_ERROR_TYPES
            ),
            summary="the run's tool specs",
        )
    except ActivityError as error:
        cause = error.cause
        if isinstance(cause, CancelledError):
            # Cancelled before step 1: the run ends CANCELED, not as a configuration error.
            raise asyncio.CancelledError("the run was cancelled as it started") from None
        if isinstance(cause, ApplicationError) and cause.type == "AgentConfigurationError":
            raise AgentConfigurationError(cause.message) from None
        raise AgentConfigurationError(
            f"the worker could not list its tools: {describe_failure(cause)}"
        ) from None
