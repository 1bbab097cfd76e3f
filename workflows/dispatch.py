"""Dispatch: one model reply becomes a plan of what happens to each call, before anything runs.

For every call the plan says one thing: run it (and whether a person must decide first), refuse
it with a result the model can act on, take it as the answer (finish), or submit it
as the plan a person reviews (submit_plan). The gates ask for the approvals the plan names and
the tool runner carries out the rest; neither decides anything again. Also which tools are
offered at a step, and unique call ids.

Pure and deterministic: no Temporal API, no clock. It counts repeated calls in the run's loop
counts, which is its only effect. Tested without a server (tests/test_dispatch.py).
"""

from __future__ import annotations

import json
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from . import approval, json_schema
from .builtin_tools import (
    DELEGATE_SPEC,
    FINISH,
    LOOP_TOOLS,
    SUBMIT_PLAN,
    SUBMIT_PLAN_PARAMETERS,
    SUBMIT_PLAN_SPEC,
    finish_spec,
)
from .decisions import ToolCallDecision
from .inputs import ToolApprovalPolicy
from .loop_detection import LoopDetector
from .outcomes import Outcome, bounded
from .specs import ToolSpec
from .transcript import AssistantMessage, ToolCall
from .versioning import Behaviours

MAX_ARGUMENT_DEPTH = 32
"""Nesting a tool's arguments may have (the object itself is level 1)."""
MAX_CALLS_PER_REPLY = 100
"""Calls one reply may make; each one past it gets an error result saying so, and runs not. Far
more than a model fans out for a task it means (parallel calls come in the tens), and what
keeps one reply's results in a run's history bounded: 100 results of a tool's default 8,000
characters are 800 KB. A reply of 2,100 calls once wedged a run: Temporal refuses a workflow
task that would have more than 2,000 activities pending, and retried it forever."""
MAX_CALL_ID_CHARS = 64
"""A call id longer than this is renamed, as a missing or repeated one is (`call_{step}_{n}`):
providers' own ids are under 40 characters, and a sub-agent's workflow id is its parent's and
the delegate call's id, which Temporal bounds at 1,000 characters."""
AFTER_FINISH = "Not run: finish came before it; the run ended with that answer."


# What happens to one call: a small union, matched exhaustively by the tool runner.
@dataclass(frozen=True)
class Run:
    spec: ToolSpec
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Refuse:
    outcome: Outcome


@dataclass(frozen=True)
class Finish:
    arguments: dict[str, Any]
    """Checked against the run's output schema already: they are the answer."""


@dataclass(frozen=True)
class SubmitPlan:
    steps: list[str]


Action = Run | Refuse | Finish | SubmitPlan

Ask = Literal["person", "remembered_denial"]
"""A call that waits for a decision: from a person, or denied at once by one they remembered."""


@dataclass(frozen=True)
class PlannedCall:
    call: ToolCall
    action: Action
    ask: Ask | None = None
    """Set when the call's approval request is opened before anything runs."""


@dataclass(frozen=True)
class ReplyChecks:
    """What in one reply would be planned otherwise by a run recorded before its bound: the
    run asks its history (versioning) only when one of these is true."""

    too_many_calls: bool
    duplicate_keys: bool
    long_call_ids: bool
    slashed_call_ids: bool


def check_reply(calls: Sequence[ToolCall]) -> ReplyChecks:
    return ReplyChecks(
        too_many_calls=len(calls) > MAX_CALLS_PER_REPLY,
        duplicate_keys=any(_duplicated_key(call.arguments) is not None for call in calls),
        long_call_ids=any(len(call.id) > MAX_CALL_ID_CHARS for call in calls),
        slashed_call_ids=any("/" in call.id for call in calls),
    )


@dataclass(frozen=True)
class RunFacts:
    """What dispatch reads of the run: its input, its tools and where its plan stands."""

    tools: Mapping[str, ToolSpec]
    """The run's own tools (without the loop's built-ins)."""
    offered: Sequence[ToolSpec]
    plan_mode: bool
    plan_approved: bool
    output_schema: dict[str, Any] | None
    policy: ToolApprovalPolicy
    remembered: Mapping[str, ToolCallDecision]
    behaviours: Behaviours
    max_calls: int | None = None
    """Calls a reply may make (MAX_CALLS_PER_REPLY); None: a run from before the bound."""
    refuses_duplicate_keys: bool = False
    """Arguments with a key twice are refused (a run from before took the last one)."""


def offered_tools(
    tools: Mapping[str, ToolSpec],
    *,
    sub_agents: bool,
    read_result: ToolSpec | None,
    plan_mode: bool,
    plan_approved: bool,
    output_schema: dict[str, Any] | None,
    run_code: ToolSpec | None = None,
) -> list[ToolSpec]:
    """What the model may call now: until a plan is approved, read-only tools and submit_plan;
    then every tool and finish. read_result is offered once there is something to read, and
    run_code in code mode (a script may change data: after the plan, as such a tool)."""
    offered = list(tools.values())
    if sub_agents:
        offered.append(DELEGATE_SPEC)
    if run_code is not None:
        offered.append(run_code)
    if read_result is not None:
        offered.append(read_result)
    if plan_mode and not plan_approved:
        return [*(spec for spec in offered if not spec.side_effects), SUBMIT_PLAN_SPEC]
    return [*offered, finish_spec(output_schema)]


def plan_reply(
    calls: Sequence[ToolCall], facts: RunFacts, loops: LoopDetector
) -> list[PlannedCall]:
    """What happens to each call of one reply, in call order."""
    planned: list[PlannedCall] = []
    finished = planned_plan = False
    for position, call in enumerate(calls):
        if facts.max_calls is not None and position >= facts.max_calls:
            # Past the bound nothing is looked at: not even loop counts move.
            planned.append(
                PlannedCall(
                    call, Refuse(Outcome.error(call, _too_many(position, calls, facts.max_calls)))
                )
            )
            continue
        action = _dispose(call, facts, loops)
        ask = _asks(call, action, facts) if facts.behaviours.per_tool_approval else None
        if finished and facts.behaviours.bounded_dispatch:
            # finish promises it: nothing called after it runs. (Its approval request is
            # still opened, then withdrawn, as runs have always done.)
            action = Refuse(Outcome.not_run(call, AFTER_FINISH))
        elif isinstance(action, SubmitPlan):
            if planned_plan:
                text = "Error: one plan at a time; this one was not submitted."
                action = Refuse(Outcome.error(call, text))
            planned_plan = True
        finished = finished or isinstance(action, Finish)
        planned.append(PlannedCall(call, action, ask))
    return planned


def _too_many(position: int, calls: Sequence[ToolCall], bound: int) -> str:
    return (
        f"Error: not run: a reply may make at most {bound} calls, and this is call "
        f"{position + 1} of {len(calls)}. Make the ones you still need in your next reply, "
        "fewer at a time."
    )


def parse_arguments(
    call: ToolCall, behaviours: Behaviours, refuse_duplicate_keys: bool = False
) -> dict[str, Any] | Refuse:
    """The call's arguments as an object, or why the model must send them again."""
    try:
        arguments, key = parsed_json(call.arguments) if call.arguments.strip() else ({}, None)
    except (ValueError, RecursionError) as error:
        reason = "nested too deep to read" if isinstance(error, RecursionError) else error
        return Refuse(
            Outcome.error(
                call,
                f"Error: the arguments for {call.name} are not valid JSON ({reason}). The tool "
                "did not run; send a JSON object that matches its schema.",
            )
        )
    if not isinstance(arguments, dict):
        # A string says what it is: the worker puts a note there for arguments too large to
        # carry (activities/oversized_reply.py), and the model must read it.
        said = f": {bounded(arguments, 300)}" if isinstance(arguments, str) else ""
        return Refuse(
            Outcome.error(
                call,
                f"Error: the arguments for {call.name} must be a JSON object, not "
                f"{type(arguments).__name__}{said}. The tool did not run.",
            )
        )
    if refuse_duplicate_keys and key is not None:
        # The last of two wins in the parse: a person shown the first would approve one thing
        # and the tool would run another. Refused before anyone is asked.
        return Refuse(
            Outcome.error(
                call,
                f"Error: the arguments for {call.name} have the key {bounded(repr(key))} more "
                "than once. The tool did not run; send each key once.",
            )
        )
    depth = nesting_depth(arguments)
    if depth > MAX_ARGUMENT_DEPTH and behaviours.bounded_dispatch:
        # Deeper than this no tool needs, and past ~200 levels the activity's input cannot even
        # be encoded: the workflow task would fail again and again.
        return Refuse(
            Outcome.error(
                call,
                f"Error: the arguments for {call.name} are nested {depth} levels deep (at most "
                f"{MAX_ARGUMENT_DEPTH}). The tool did not run; send flatter arguments.",
            )
        )
    return arguments


def nesting_depth(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def with_unique_call_ids(
    message: AssistantMessage,
    step: int,
    earlier: Container[str],
    *,
    bounded_ids: bool = False,
    unqualified_ids: bool = False,
) -> AssistantMessage:
    """Models sometimes repeat or omit call ids; every call of a run needs its own, for its
    result and for its idempotency key. With `bounded_ids`, one over MAX_CALL_ID_CHARS is
    renamed too (a sub-agent's workflow id is built from it). With `unqualified_ids`, one with a
    '/' is renamed too: a parent shows its sub-agent's calls qualified by the delegate call
    (`call_1_1/call_2_1`, sub_agent_relay.py), and a call of its own named so would be decided
    in their place."""
    ids = [call.id for call in message.tool_calls]
    too_long = bounded_ids and any(len(i) > MAX_CALL_ID_CHARS for i in ids)
    qualified = unqualified_ids and any("/" in i for i in ids)
    unique = all(ids) and len(set(ids)) == len(ids) and not any(i in earlier for i in ids)
    if unique and not too_long and not qualified:
        return message
    seen: set[str] = set()
    calls = []
    for position, call in enumerate(message.tool_calls):
        call_id = call.id
        renamed = (bounded_ids and len(call_id) > MAX_CALL_ID_CHARS) or (
            unqualified_ids and "/" in call_id
        )
        if renamed or not call_id or call_id in seen or call_id in earlier:
            call_id = f"call_{step}_{position + 1}"
            while call_id in seen or call_id in earlier:
                call_id += "_"
        seen.add(call_id)
        calls.append(call.model_copy(update={"id": call_id}))
    return message.model_copy(update={"tool_calls": tuple(calls)})


def parsed_json(text: str) -> tuple[Any, str | None]:
    """JSON a model wrote, parsed as json.loads parses it (the last of a repeated key wins), and
    a key that appears twice in one of its objects, if one does: a call's arguments, or auto
    mode's verdict (judge.py). Raises what json.loads raises."""
    duplicate: str | None = None

    def to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal duplicate
        result = dict(pairs)
        if duplicate is None and len(result) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    duplicate = key
                    break
                seen.add(key)
        return result

    return json.loads(text, object_pairs_hook=to_dict), duplicate


def _duplicated_key(arguments: str) -> str | None:
    """A key that appears twice in one object of these arguments (at any depth), if one does;
    None for arguments without one, or that are not valid JSON (refused elsewhere)."""
    try:
        return parsed_json(arguments)[1] if arguments.strip() else None
    except (ValueError, RecursionError):
        return None


def _dispose(call: ToolCall, facts: RunFacts, loops: LoopDetector) -> Action:
    specs = {spec.name: spec for spec in facts.offered}
    if call.name not in specs:
        text = _not_offered(call.name, list(specs), facts)
        if call.name in facts.tools or call.name in LOOP_TOOLS:
            return Refuse(Outcome.refused(call, text))
        return Refuse(Outcome.error(call, text))
    arguments = parse_arguments(call, facts.behaviours, facts.refuses_duplicate_keys)
    if isinstance(arguments, Refuse):
        return arguments
    if call.name == FINISH:
        problems = json_schema.problems(
            finish_spec(facts.output_schema).parameters,
            arguments,
            linear=facts.behaviours.linear_schema_checks or facts.output_schema is None,
        )
        if problems:
            return Refuse(
                Outcome.error(
                    call,
                    f"Error: the answer does not match the required schema: {problems}. "
                    "Call finish again with corrected arguments.",
                )
            )
        return Finish(arguments)
    if call.name == SUBMIT_PLAN:
        problem = json_schema.problems(SUBMIT_PLAN_PARAMETERS, arguments)
        if problem:
            return Refuse(Outcome.error(call, f"Error: the plan is not valid: {problem}."))
        return SubmitPlan([str(step) for step in arguments["steps"]])
    times = loops.record(call.name, call.arguments)
    if loops.is_loop(times):
        return Refuse(Outcome.loop(call, loops.feedback(call.name, times)))
    spec = specs[call.name]
    if spec.callback and (problem := json_schema.problems(spec.parameters, arguments)):
        # No activity checks a callback's arguments: the client must get valid ones.
        return Refuse(
            Outcome.error(call, f"Error: invalid arguments for {call.name}: {bounded(problem)}.")
        )
    return Run(spec, arguments)


def _asks(call: ToolCall, action: Action, facts: RunFacts) -> Ask | None:
    """Whether the call waits for a decision before it runs, under the run's policy."""
    if not isinstance(action, Run):
        return None  # refused before it could run, or the loop's own: nobody needs to decide
    if not approval.needs_approval(action.spec, plan_approved=facts.plan_approved):
        return None
    if approval.approved_by_policy(facts.policy, call.name, action.arguments):
        return None
    remembered = facts.remembered.get(call.name)
    if remembered is None:
        return "person"
    return None if remembered.approve else "remembered_denial"


def _not_offered(name: str, offered: list[str], facts: RunFacts) -> str:
    if facts.plan_mode and name in facts.tools:
        return (
            f"Error: {name} changes data and is not available until a person approves your "
            f"plan; call {SUBMIT_PLAN} first."
        )
    if name == SUBMIT_PLAN and facts.plan_mode:
        return "Error: your plan is approved already; carry it out."
    if name == FINISH and facts.plan_mode:
        return f"Error: submit your plan with {SUBMIT_PLAN} first."
    available = ", ".join(sorted(n for n in offered if n not in LOOP_TOOLS))
    loop_tools = ", ".join(n for n in offered if n in LOOP_TOOLS)
    return (
        f"Error: no tool named {bounded(repr(name))}. Available tools: {available}, {loop_tools}."
    )
