"""Run setup: what a run is given, settled before its first step.

Its tools (read from the worker by the `resolve_tools` local activity when the run starts, again
when it continues as new, and recorded in the history, so replay never asks a worker's registry
or an MCP server; runs from before that read the registry), and
the checks of its input that would otherwise fail it later, or wedge it: a valid, self-contained
output schema, and approval predicates the worker has. A run that fails here fails before step 1,
with the reason, and has paid for nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

from . import approval, fork, json_schema, tool_catalog, versioning
from .budget import Budget
from .builtin_tools import RESERVED_TOOL_NAMES
from .errors import (
    FATAL_ERROR_TYPES,
    AgentConfigurationError,
    AgentInputTooLarge,
    activity_failure_cause,
    describe_failure,
)
from .input_limits import InputTooLarge, check_input, json_bytes
from .inputs import AgentInput
from .script_tools import RUN_CODE
from .specs import ToolSpec
from .state import RunState, RunTools, ToolSelection
from .versioning import Behaviours

MAX_NOTICES = 10
"""Notices a run keeps about its tools (the newest): a chain whose listing fails at every
continue-as-new must not grow its state."""
CODE_MODES_OWN = (
    f"a tool named {RUN_CODE!r} is code mode's own: rename the tool, or run without code mode"
)
"""Why a run in code mode refuses another tool named `run_code`."""


async def settle(agent_input: AgentInput, state: RunState, behaviours: Behaviours) -> RunTools:
    """The run's tools, with its input checked; raises AgentConfigurationError."""
    if state.tools is None and behaviours.records_tool_specs:
        state.tools = await _recorded(agent_input.tools)
        state.tools_listed_in_run = state.runs
    elif state.tools is not None and behaviours.relists_tools and _listed_earlier(state):
        state.tools = await _relisted(agent_input.tools, state)
        state.tools_listed_in_run = state.runs
    if state.tools is not None:
        run_tools = tool_catalog.described(state.tools)
    else:
        try:
            run_tools = tool_catalog.for_run(agent_input.tools)
        except KeyError as error:
            raise AgentConfigurationError(f"the run asks for tools {error.args[0]}") from None
    worker_tools = [spec.name for spec in run_tools.tools]
    if agent_input.callback_tools:
        check_callback_names(worker_tools, agent_input)
        run_tools = _with_callbacks(run_tools, agent_input)
    if agent_input.code_mode is not None and RUN_CODE in worker_tools:
        raise AgentConfigurationError(CODE_MODES_OWN)
    _check_output_schema(agent_input, behaviours)
    if unknown := approval.unknown_predicates(agent_input.tool_approval):
        raise AgentConfigurationError(
            f"the run's approval policy names predicates that are not registered: {unknown}"
        )
    return run_tools


def check_callback_names(worker_tools: Collection[str], agent_input: AgentInput) -> None:
    """AgentConfigurationError for a callback tool of `agent_input` whose name another tool of
    the run has: a built-in one, code mode's own, one of the worker's `worker_tools`, or a
    callback tool declared before it. The model would be offered two tools of one name, which
    the providers refuse. The run's rule, and a door's that takes a client's tools
    (serving/ag_ui.py), which refuses them by it before it starts the run."""
    taken = dict.fromkeys(worker_tools, "one of the worker's tools")
    taken.update(dict.fromkeys(sorted(RESERVED_TOOL_NAMES), "a built-in tool of every run"))
    for tool in agent_input.callback_tools:
        if agent_input.code_mode is not None and tool.name == RUN_CODE:
            raise AgentConfigurationError(CODE_MODES_OWN)
        if tool.name in taken:
            raise AgentConfigurationError(
                f"callback tool {tool.name!r}: {taken[tool.name]} has that name: rename it"
            )
        taken[tool.name] = "another callback tool"


def _with_callbacks(run_tools: RunTools, agent_input: AgentInput) -> RunTools:
    """The worker's tools and the callback tools the input declares (their names checked by
    `check_callback_names`); AgentConfigurationError for a schema the linear engine refuses."""
    declared: list[ToolSpec] = []
    for tool in agent_input.callback_tools:
        for part, schema in (("parameters", tool.parameters), ("result", tool.result)):
            if schema is None:
                continue
            try:
                _check(schema, linear=True)
            except json_schema.SchemaRefused as refused:
                raise AgentConfigurationError(
                    f"callback tool {tool.name!r} {part} {refused}"
                ) from None
        declared.append(tool.spec())
    return run_tools.model_copy(update={"tools": [*run_tools.tools, *declared]})


def _check_output_schema(agent_input: AgentInput, behaviours: Behaviours) -> None:
    schema = agent_input.output_schema
    if schema is None:
        return
    linear = behaviours.linear_schema_checks
    try:
        _check(schema, linear=linear)
    except json_schema.SchemaRefused as refused:
        raise AgentConfigurationError(f"output_schema {refused}") from None
    external = json_schema.external_refs(schema)
    if not linear and external and behaviours.bounded_sub_agents:
        # As runs recorded before the linear engine refused it, after the validity check.
        raise AgentConfigurationError(
            f"output_schema refers outside itself ($ref {', '.join(external)}); a workflow "
            "cannot fetch schemas: inline them under $defs"
        )


def _check(schema: dict[str, Any], *, linear: bool) -> None:
    """json_schema.check, with another dialect than Draft 2020-12 refused where the run's
    history says so (versioning.refuses_foreign_dialects, asked only for such a schema)."""
    refused = (
        linear
        and json_schema.foreign_dialect(schema) is not None
        and versioning.refuses_foreign_dialects()
    )
    json_schema.check(schema, linear=linear, foreign_dialects_refused=refused)


def _listed_earlier(state: RunState) -> bool:
    """A run that continued as new, with the tools an earlier run of its chain listed."""
    return state.runs > 1 and state.tools_listed_in_run != state.runs


async def _relisted(names: list[str] | None, state: RunState) -> RunTools:
    """The tools listed again as a continued run starts: an MCP server's may have changed.
    When listing fails (a server that must be there is down), the run keeps the tools it was
    offered before, and says so, rather than failing with side effects behind it."""
    assert state.tools is not None
    try:
        return await _recorded(names)
    except AgentConfigurationError as error:
        notice = (
            f"the tools could not be listed again as run {state.runs} of this workflow "
            f"started ({error.message}); it keeps the tools it was offered before"
        )
        notices = [*state.tools.notices, notice][-MAX_NOTICES:]
        return state.tools.model_copy(update={"notices": notices})


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
    except (ActivityError, ApplicationError) as error:
        cause = activity_failure_cause(error)
        if isinstance(cause, CancelledError):
            # Cancelled before step 1: the run ends CANCELED, not as a configuration error.
            raise asyncio.CancelledError("the run was cancelled as it started") from None
        if isinstance(cause, ApplicationError) and cause.type == "AgentConfigurationError":
            raise AgentConfigurationError(cause.message) from None
        raise AgentConfigurationError(
            f"the worker could not list its tools: {describe_failure(cause)}"
        ) from None


def initial_state(agent_input: AgentInput) -> RunState:
    """A run's state: carried on from the run it continued, a fork's seed, or a fresh one."""
    if agent_input.carried is not None:
        return agent_input.carried
    if agent_input.fork is not None:
        state = fork.seeded_state(agent_input.fork, workflow.now())
    else:
        state = RunState.start(workflow.now())
    # A sub-agent holds the denials its parent was asked to remember.
    for tool, denial in agent_input.remembered_denials.items():
        state.remembered.setdefault(tool, denial)
    return state


def check_input_size(agent_input: AgentInput, budget: Budget) -> None:
    """One rule for the input at the start and at every hand-on (input_limits.py): an input
    that could not be carried fails now, before anything is paid for."""
    try:
        check_input(json_bytes(agent_input), len(agent_input.prompt))
    except InputTooLarge as refused:
        if versioning.refuses_oversized_input():
            raise AgentInputTooLarge(str(refused), budget.details()) from None
