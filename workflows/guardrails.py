"""Guardrails as durable steps (docs/guardrails.md): the checks a run's `GuardrailPolicy` names,
each an activity (`guardrail:NAME`), its verdict recorded in the history before what it guards
goes ahead.

- Input: the prompt and each message a conversation takes are kept here until checked. A
  blocking guardrail is awaited before the step's model call; the others run beside it, and the
  reply is read only once they pass. A trip fails the run (AgentGuardrailTripped, after the
  loop undoes what the run did), or refuses the one message of a conversation that says so.
- Output: the final answer, before it is returned. A trip tells the model why, and it revises,
  up to `max_revisions` times; then the run fails.
- Tool results: each result a tool (a script, a sub-agent, a client) hands back, before the
  model reads it. A trip puts a refusal in its place.

Fails closed: a guardrail that raises (past its retries), times out or is not registered on the
worker has tripped, with that reason. Every verdict goes into the step's trace record and on
the progress stream. Deterministic: the activities are the only I/O.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from .budget import Budget
from .context import RunContext
from .elapsed import ms_since
from .errors import AgentGuardrailTripped, activity_failure_cause, describe_failure
from .events import SHOWN_RESULT_CHARS
from .guardrail_data import (
    GUARDRAIL_ACTIVITY_PREFIX,
    MAX_REASON_CHARS,
    GuardrailCheck,
    GuardrailKind,
    GuardrailPolicy,
    GuardrailRecord,
    GuardrailRef,
    GuardrailVerdict,
)
from .guardrail_judge import judged
from .model_gateway import ModelGateway
from .outcomes import Outcome, bounded
from .reporting import Reporter
from .state import StepRecord
from .transcript import UserMessage

ATTEMPTS = 3
NOT_RETRIED = ["NotFoundError", "GuardrailError"]
"""A guardrail this worker does not serve, and one that answered something other than a
verdict: no retry can help, so either trips at once."""


class Guardrails:
    def __init__(self, ctx: RunContext, reporter: Reporter, budget: Budget) -> None:
        self._ctx, self._reporter, self._budget = ctx, reporter, budget
        self._policy = ctx.input.guardrails or GuardrailPolicy()
        self._gateway: ModelGateway | None = None
        self._blocked: list[GuardrailRecord] = []
        """The blocking input checks' verdicts, made before the step's record exists."""

    def uses(self, kind: GuardrailKind) -> bool:
        return bool(self._policy.of(kind))

    # --- input -------------------------------------------------------------------------------

    def take_input(self, text: str) -> None:
        """A person's text entered the transcript (the prompt, a conversation's message): it is
        checked with the next model call."""
        if self.uses("input"):
            self._ctx.state.unchecked_inputs.append(text)

    async def start_input_checks(self, step: int) -> asyncio.Task[list[GuardrailRecord]] | None:
        """Check what came in since the last model call: the blocking guardrails now (a trip
        raises here, before the model is called), the others beside the call (a task)."""
        texts = self._ctx.state.unchecked_inputs
        if not texts:
            return None
        refs = self._policy.input
        blocking = [ref for ref in refs if ref.blocking]
        if blocking:
            self._blocked = await self._check_all("input", texts, blocking, step)
            self._raise_if_tripped(self._blocked)
        others = [ref for ref in refs if not ref.blocking]
        return asyncio.create_task(self._check_all("input", texts, others, step))

    async def inputs_checked(
        self, checks: asyncio.Task[list[GuardrailRecord]] | None, record: StepRecord
    ) -> GuardrailRecord | None:
        """After the model call: the checks' verdicts on the step's record. A trip raises
        AgentGuardrailTripped, or, in a conversation that refuses messages, is returned."""
        if checks is None:
            return None
        state = self._ctx.state
        records = [*self._blocked, *await checks]
        self._blocked = []
        record.guardrails.extend(records)
        texts, state.unchecked_inputs = state.unchecked_inputs, []
        tripped = next((r for r in records if r.tripped), None)
        if tripped is None:
            return None
        # A conversation that refuses messages drops them from the transcript, so that no
        # later call reads them: they are its last messages (appended just before the call),
        # and never the prompt, without which nothing is left to answer.
        messages, n = state.messages, len(texts)
        last = [m.content if isinstance(m, UserMessage) else None for m in messages[-n:]]
        refuses = self._policy.refuse_in_conversation and state.conversation is not None
        if refuses and len(messages) > n and last == texts:
            del messages[-n:]
            return tripped
        self._raise_if_tripped(records)
        return None

    # --- output ------------------------------------------------------------------------------

    async def answer_checked(self, answer: str, output: dict[str, Any] | None) -> str | None:
        """None when the answer may be returned; else what the model is told to revise it by.
        Past `max_revisions`, raises AgentGuardrailTripped: no answer that tripped is ever
        returned."""
        if not self.uses("output"):
            return None
        state = self._ctx.state
        text = answer if output is None else f"{answer}\n{json.dumps(output, sort_keys=True)}"
        records = await self._check_all("output", [text], self._policy.output, state.steps)
        if state.step_records:
            state.step_records[-1].guardrails.extend(records)
        tripped = [r for r in records if r.tripped]
        if not tripped:
            state.guardrail_revisions = 0
            return None
        if state.guardrail_revisions >= self._policy.max_revisions:
            self._raise_if_tripped(records)
        state.guardrail_revisions += 1
        reasons = "; ".join(f"guardrail {r.name}: {r.reason}" for r in tripped)
        return (
            f"Your answer was not given to the user: {reasons}. Revise it "
            f"(revision {state.guardrail_revisions} of at most {self._policy.max_revisions})."
        )

    # --- tool results ------------------------------------------------------------------------

    async def results_checked(
        self, outcomes: Sequence[Outcome], record: StepRecord
    ) -> dict[str, Outcome]:
        """The reply's outcomes whose result a tool-result guardrail stopped, by call id: a
        refusal in the result's place, its record saying which guardrail."""
        if not self.uses("tool_result"):
            return {}
        checked = [o for o in outcomes if o.handed_back]
        verdicts = await asyncio.gather(*(self._result_checks(o, record.step) for o in checked))
        refused: dict[str, Outcome] = {}
        for outcome, records in zip(checked, verdicts, strict=True):
            record.guardrails.extend(records)
            tripped = next((r for r in records if r.tripped), None)
            if tripped is not None:
                refused[outcome.result.tool_call_id] = outcome.withheld(
                    tripped.name, tripped.reason
                )
        return refused

    async def _result_checks(self, outcome: Outcome, step: int) -> list[GuardrailRecord]:
        """A result's verdicts, published together once all are in, in the policy's order,
        with the call's id. One carries what the model reads, cut as a tool_call_finished's
        result is: the last, once all passed, the result; else the first that tripped, the
        refusal in its place (`withheld`). So a stream shows a result only once it passed (the
        call's tool_call_finished, before the checks, did not)."""
        result = outcome.result
        records = await self._check_all(
            "tool_result",
            [result.content],
            self._policy.tool_results,
            step,
            tool=result.tool_name,
            publish=False,
        )
        tripped = next((r for r in records if r.tripped), None)
        if tripped is None:
            read, telling = result.content, records[-1] if records else None
        else:
            read = outcome.withheld(tripped.name, tripped.reason).result.content
            telling = tripped
        for record in records:
            self._publish(
                record,
                step,
                tool=result.tool_name,
                call_id=result.tool_call_id,
                result=read[:SHOWN_RESULT_CHARS] if record is telling else None,
            )
        return [r.model_copy(update={"call_id": result.tool_call_id}) for r in records]

    # --- checks ------------------------------------------------------------------------------

    async def _check_all(
        self,
        kind: GuardrailKind,
        texts: Sequence[str],
        refs: Sequence[GuardrailRef],
        step: int,
        *,
        tool: str | None = None,
        publish: bool = True,
    ) -> list[GuardrailRecord]:
        """Every guardrail on every text, at once; their verdicts in order, each published
        as it comes unless `publish` is False."""
        text = "\n\n".join(texts)
        check = GuardrailCheck(
            kind=kind, text=text, workflow_id=workflow.info().workflow_id, step=step, tool=tool
        )
        checks = (self._check(ref.name, check, publish) for ref in refs)
        return list(await asyncio.gather(*checks))

    def use_gateway(self, gateway: ModelGateway) -> None:
        """The model calls of the run's judge guardrails (guardrail_judge.py)."""
        self._gateway = gateway

    async def _check(self, name: str, check: GuardrailCheck, publish: bool) -> GuardrailRecord:
        started = workflow.now()
        judge = self._policy.judges.get(name)
        ctx = self._ctx
        try:
            if judge is not None:
                gateway, budget = self._gateway, self._budget
                assert gateway is not None, "the loop gives its gateway before step 1"
                verdict = await judged(name, judge, check, gateway, budget, ctx.state)
            else:
                verdict = await self._run_function(name, check)
            tripped, reason = verdict.tripped, verdict.reason
        except (ActivityError, ApplicationError) as error:
            tripped = True
            reason = f"the guardrail failed, so it counts as tripped: {_failure(error)}"
        latency = ms_since(started)
        record = GuardrailRecord(
            name=name,
            kind=check.kind,
            tripped=tripped,
            reason=" ".join(reason.split())[:MAX_REASON_CHARS],
            latency_ms=latency,
        )
        if publish:
            self._publish(record, check.step, tool=check.tool)
        return record

    def _publish(self, record: GuardrailRecord, step: int, **more: str | None) -> None:
        """A verdict's guardrail event (`more`: a tool result's tool, call_id, result)."""
        reason = f": {record.reason}" if record.tripped else ""
        self._reporter.publish(
            "guardrail",
            step=step,
            outcome="tripped" if record.tripped else "passed",
            latency_ms=record.latency_ms,
            text=f"{record.kind} guardrail {record.name}{reason}",
            **more,
        )

    async def _run_function(self, name: str, check: GuardrailCheck) -> GuardrailVerdict:
        """A guardrail the app registered, as its activity."""
        return await workflow.execute_activity(
            GUARDRAIL_ACTIVITY_PREFIX + name,
            check,
            result_type=GuardrailVerdict,
            start_to_close_timeout=timedelta(seconds=self._policy.timeout_seconds),
            schedule_to_close_timeout=self._budget.deadline(workflow.now()),
            retry_policy=RetryPolicy(
                maximum_attempts=ATTEMPTS, non_retryable_error_types=NOT_RETRIED
            ),
            summary=f"{check.kind} guardrail {name}",
        )

    def _raise_if_tripped(self, records: Sequence[GuardrailRecord]) -> None:
        tripped = [r for r in records if r.tripped]
        if tripped:
            first = tripped[0]
            details = self._budget.details()
            details.guardrail = first
            message = f"{first.kind} guardrail {first.name} tripped: {first.reason}"
            raise AgentGuardrailTripped(message, details)


def _failure(error: ActivityError | ApplicationError) -> str:
    return bounded(describe_failure(activity_failure_cause(error)), 300)
