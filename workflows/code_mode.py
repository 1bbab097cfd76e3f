"""Code mode's run_code call: a model's script, run leg by leg, each of its calls a direct call.

The rule of this room: the script never runs in the workflow, and none of its calls runs
anywhere but the tool runner. A leg (the `run_script` activity, activities/scripts.py) runs the
script in a sandbox until it waits on calls, and returns them with the script's saved state;
the calls go through the same path as a reply's (dispatch's checks, the approval gate, the tool
activity with its own retries, timeout and idempotency key, the result bound, the compensation
log), as one batch; the next leg resumes the saved state with their results. So a crash anywhere
loses nothing and repeats nothing: the completed calls are in the history, and a leg is retried
from the state the history recorded. Each call's trace record names the run_code call
(`ToolCallRecord.script`), and so do its events and a waiting call's request. A conversation's
interrupt stops a script where it is: no leg runs after it. A fork inside a script
(ForkSeed.script) starts its script at a leg of the original's, with the results the original's
calls before the fork's call got. Deterministic code only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from . import dispatch
from .activity_io import ScriptCallResult, ScriptLeg, ScriptLegInput
from .budget import Budget
from .context import RunContext
from .elapsed import ms_since
from .errors import describe_failure
from .inputs import AgentInput, CodeMode, ScriptResume
from .interruption import cancelled_text
from .loop_detection import LoopDetector
from .outcomes import Outcome, count
from .reporting import Reporter
from .script_tools import RUN_SCRIPT, run_code_spec, script_callable
from .specs import ToolSpec
from .tool_call_gate import ToolCallGate
from .transcript import ToolCall

LEG_GRACE_SECONDS = 30.0
"""A leg's attempt may take the script's whole execution time and this much more: starting a
sandbox, loading the saved state, and the sandbox's own backstop past its limit."""
LEG_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.2),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=5,
)
"""A leg is retried when its worker is lost: from the same saved state, it does the same."""
INTERRUPTED = "the user interrupted the turn"
"""Why a conversation's interrupt stopped a script (workflows/interruption.py): no leg runs
after it; the calls in flight end as a reply's do, and what they did stands."""
BATCH_SHOWN = 10
"""The calls of the batch an interrupt stopped that run_code's result names, at most."""
NOT_AWAITED = (
    "{n} started without await and never awaited, so they did not run: write `await name(...)`."
)


class CodeRunner:
    """The run_code calls of a run in code mode."""

    def __init__(
        self,
        ctx: RunContext,
        budget: Budget,
        gate: ToolCallGate,
        reporter: Reporter,
        tools: Mapping[str, ToolSpec],
        facts: Callable[[], dispatch.RunFacts],
        loops: LoopDetector,
    ) -> None:
        mode = ctx.input.code_mode
        assert mode is not None, "only a run in code mode runs scripts"
        self._mode: CodeMode = mode
        self._input = ctx.input
        self._state = ctx.state
        self._budget = budget
        self._gate = gate
        self._reporter = reporter
        self._tools = tools
        self._facts = lambda: script_facts(facts())
        self._loops = loops
        self.run_batch: Callable[[list[dispatch.PlannedCall]], Any] | None = None
        """The tool runner's: carries out a batch's plan (set by the runner that owns this)."""
        self.interrupted: Callable[[], bool] = lambda: False
        """Whether a conversation's interrupt stopped the turn (set by the runner that owns
        this): the script then stops where it is, its calls in flight handled as a reply's."""

    async def run(self, call: ToolCall, arguments: dict[str, Any]) -> Outcome:
        """Run the script of one run_code call to its end; its outcome is run_code's."""
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return Outcome.error(
                call, "Error: run_code takes one argument, code: the Python script, as a string."
            )
        outcome = await self._run(call, code)
        made = [i for i, script in self._reporter.scripts.items() if script == call.id]
        for call_id in made:  # their events are out: the names need not be kept
            del self._reporter.scripts[call_id]
        return outcome

    async def _run(self, call: ToolCall, code: str) -> Outcome:
        started = workflow.now()
        mode = self._mode
        tools = sorted(name for name, spec in self._tools.items() if script_callable(spec))
        leg_input = ScriptLegInput(
            tool_call_id=call.id,
            step=self._state.steps,
            code=code,
            tools=tools,
            max_cpu_seconds=mode.max_cpu_seconds,
            max_memory_bytes=mode.max_memory_bytes,
            max_calls=mode.max_calls,
            output_chars_left=mode.max_output_chars,
        )
        printed: list[str] = []
        left_out = made = legs = 0
        leg: ScriptLeg | None = None
        inherited: list[ScriptCallResult] = []
        if (resume := self._resumed(call)) is not None:  # a fork inside this script
            # Its step's reply was given, not asked: no call reported the context's size.
            self._budget.forget_reported_context()
            leg = ScriptLeg.model_validate(resume.leg)
            inherited = [ScriptCallResult.model_validate(r) for r in resume.inherited]
            printed, left_out = [resume.printed], resume.printed_left_out
            made, legs = resume.calls_made, resume.legs
        while True:
            if leg is None:
                legs += 1
                self._reporter.set_status(
                    "running", f"step {self._state.steps}: script {call.id} running (leg {legs})"
                )
                try:
                    leg = await self._leg(call, leg_input, legs)
                except ActivityError as failure:
                    text = f"Error: the script could not run: {describe_failure(failure.cause)}."
                    return Outcome.error(call, text, latency_ms=ms_since(started), attempts=legs)
                printed.append(leg.printed)
                left_out += leg.printed_left_out
            if leg.status != "waiting":
                break
            if self.interrupted():  # during the leg: the calls it asked for are not made
                more = count(len(leg.calls), "more call")
                reason = f"{INTERRUPTED} before it could make {more}"
                leg = leg.model_copy(update={"status": "stopped", "reason": reason})
                break
            results, fatal, outcomes = await self._run_calls(call, leg, made, inherited)
            made += len(leg.calls)
            if fatal is not None:
                text = f"Error: the script was stopped: {fatal}."
                return Outcome.error(
                    call, text, latency_ms=ms_since(started), attempts=legs, fatal=fatal
                )
            if self.interrupted():  # no leg after it: the script stops where it is
                reason = f"{INTERRUPTED} ({_batch_line(outcomes)})"
                leg = leg.model_copy(update={"status": "stopped", "reason": reason})
                break
            room = mode.max_output_chars - sum(len(p) for p in printed)
            leg_input = leg_input.model_copy(
                update={
                    "code": None,
                    "snapshot": leg.snapshot,
                    "snapshot_ref": leg.snapshot_ref,
                    "results": results,
                    "calls_made": made,
                    "output_chars_left": room,
                }
            )
            leg, inherited = None, []
        text, ok = result_text(leg, "".join(printed), left_out, made, mode.max_output_chars)
        make = Outcome.ok if ok else Outcome.error
        return make(
            call,
            text,
            latency_ms=ms_since(started),
            attempts=legs,
            truncated=left_out > 0,
        )

    async def _leg(self, call: ToolCall, leg_input: ScriptLegInput, legs: int) -> ScriptLeg:
        return await workflow.execute_activity(
            RUN_SCRIPT,
            leg_input,
            result_type=ScriptLeg,
            start_to_close_timeout=timedelta(
                seconds=self._mode.max_cpu_seconds + LEG_GRACE_SECONDS
            ),
            schedule_to_close_timeout=self._budget.deadline(workflow.now()),
            retry_policy=LEG_RETRY,
            heartbeat_timeout=self._input.heartbeat_timeout,
            summary=f"script {call.id} leg {legs}",
        )

    def _resumed(self, call: ToolCall) -> ScriptResume | None:
        """Where a fork inside this script resumes it: in the fork's first step alone."""
        seed = self._input.fork
        if seed is None or seed.script is None or seed.origin.step != self._state.steps:
            return None
        return seed.script if seed.script.reply.tool_calls[0].id == call.id else None

    async def _run_calls(
        self,
        script: ToolCall,
        leg: ScriptLeg,
        made: int,
        inherited: list[ScriptCallResult],
    ) -> tuple[list[ScriptCallResult], str | None, list[Outcome]]:
        """Run one leg's calls as one batch, as a reply's calls run, but for the first ones a
        fork inherited the results of (`inherited`); their results as the script gets them,
        why the run must end (when a call failed fatally), and the outcomes of those it ran."""
        # The budgets a direct call's reply is held to (tokens and cost a judge spent, the wall
        # clock): a script stops where the run would.
        self._budget.check_spend(workflow.now())
        made += len(inherited)
        requests = leg.calls[len(inherited) :]
        calls = [
            ToolCall(
                id=f"{script.id}.{made + position + 1}",
                name=request.name,
                arguments=json.dumps(request.arguments, ensure_ascii=False),
            )
            for position, request in enumerate(requests)
        ]
        for tool_call in calls:
            self._reporter.scripts[tool_call.id] = script.id
        planned = dispatch.plan_reply(calls, self._facts(), self._loops)
        self._gate.open(planned, self._state.steps)
        assert self.run_batch is not None
        reply = await self.run_batch(planned)
        await self._gate.judges_done()
        # A request still open will not run (an interrupt stopped its wait, or a call before it
        # failed fatally): withdrawn now, before the calls' ends are told.
        self._gate.withdraw([tool_call.id for tool_call in calls])
        record = self._state.step_records[-1]
        results = list(inherited)
        outcomes: list[Outcome] = []
        for request, tool_call in zip(requests, calls, strict=True):
            outcome: Outcome = reply.outcomes[tool_call.id]
            outcomes.append(outcome)
            verdict = self._gate.verdict_of(tool_call.id)
            update: dict[str, Any] = {"script": script.id}
            if verdict is not None:
                update["verdict"] = verdict
            record.tool_calls.append(outcome.record.model_copy(update=update))
            self._reporter.call_finished(outcome)  # once a call: a denied one's is not out yet
            results.append(_script_result(request.call_id, outcome))
        return results, reply.fatal, outcomes


def run_code(agent_input: AgentInput, tools: Iterable[ToolSpec]) -> ToolSpec | None:
    """run_code's spec for a run in code mode, over its tools; None for any other run."""
    mode = agent_input.code_mode
    return None if mode is None else run_code_spec(tools, mode)


def script_facts(facts: dispatch.RunFacts) -> dispatch.RunFacts:
    """What dispatch plans a script's calls against: the run's own tools, as a reply's, but
    none of the loop's (finish, submit_plan, delegate, read_result, run_code)."""
    offered = [spec for spec in facts.tools.values() if script_callable(spec)]
    return dispatch.RunFacts(
        tools=facts.tools,
        offered=offered,
        plan_mode=facts.plan_mode,
        plan_approved=facts.plan_approved,
        output_schema=facts.output_schema,
        policy=facts.policy,
        remembered=facts.remembered,
        behaviours=facts.behaviours,
        refuses_duplicate_keys=True,
    )


def _script_result(call_id: int, outcome: Outcome) -> ScriptCallResult:
    result = outcome.result
    if result.is_error:
        denied = outcome.record.outcome == "denied"
        return ScriptCallResult(
            call_id=call_id,
            error=result.content,
            error_type="PermissionError" if denied else "RuntimeError",
        )
    try:
        value: Any = json.loads(result.content)
    except ValueError:
        value = result.content  # text, or JSON cut to the tool's bound
    return ScriptCallResult(call_id=call_id, value=value)


def result_text(
    leg: ScriptLeg, printed: str, left_out: int, made: int, bound: int
) -> tuple[str, bool]:
    """What the model reads of a script that ended (`leg`, its last leg: done or stopped), and
    whether it ended well: from what its legs printed (`printed`, and `left_out` characters
    past CodeMode.max_output_chars, `bound`) and the calls it made. A fork reads it again from
    the legs in a history (client/forking.py)."""
    parts = [printed.rstrip("\n")] if printed.strip() else []
    if left_out:
        parts.append(f"[{left_out:,} more characters printed, not shown]")
    calls = f"It made {count(made, 'tool call')}"
    if leg.status == "stopped":
        stopped = f"Error: the script was stopped: {leg.reason}. {calls}"
        stopped += "; their effects stand." if made else "."
        return "\n".join([stopped, *parts]), False
    if leg.value is not None:
        value = leg.value
        room = max(bound - sum(len(p) for p in parts), 200)
        if len(value) > room:
            value = value[:room] + f"... [{len(leg.value) - room:,} more characters]"
        parts.append(value)
    if leg.not_awaited:
        parts.append(NOT_AWAITED.format(n=count(leg.not_awaited, "call")))
    if not parts:
        parts.append(f"(The script printed nothing and its last line has no value. {calls}.)")
    return "\n".join(parts), True


def _batch_line(outcomes: list[Outcome]) -> str:
    """What came of each call of the batch an interrupt stopped, for the model: which ran and
    which did not, so it knows what stands."""
    shown = []
    for outcome in outcomes[:BATCH_SHOWN]:
        record = outcome.record
        became = _BECAME.get(record.outcome, record.outcome)
        if record.outcome == "error" and outcome.result.content == cancelled_text(record.name):
            became = "cancelled"
        shown.append(f"{record.id} {record.name} {became}")
    if len(outcomes) > BATCH_SHOWN:
        shown.append(f"and {count(len(outcomes) - BATCH_SHOWN, 'more call')}")
    return "its last calls: " + ", ".join(shown)


_BECAME = {"ok": "ran", "error": "failed", "not_run": "not run", "loop_detected": "refused"}
