"""The model gateway: the only place that calls the model.

One `call_model` activity per model call, called by name (the workflow imports no activity
code), with the model's own timeout and retries and what is left of the run's wall time as its
deadline. With linear history, a request names by reference what earlier calls sent (the
previous request when it is a prefix of this one, the tool results and model replies a worker
keeps, the tool list and the script), so the event history grows linearly and holds each
message's text once. A worker whose store lacks a
reference answers StoreMiss, and the request goes again whole. Errors are mapped here, once:
a provider's refusal fails the run with the provider's reason, a wall-time cut is the budget's.

A real provider's calls go to that provider's task queue (`model_task_queue`), so the workers
that poll it admit them under the provider's limits ([admission.md](../docs/admission.md)); a
scripted model's calls stay on the run's own queue.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState

from . import history
from .activity_io import ModelRequest, ModelResponse
from .budget import Budget
from .context import RunContext
from .errors import (
    FATAL_ERROR_TYPES,
    AgentBudgetExceeded,
    AgentProviderError,
    describe_failure,
    error_class,
)
from .model_settings import ScriptedTurn
from .providers import ADMITTED_PROVIDERS
from .specs import ToolSpec
from .transcript import AssistantMessage, Message, ToolResult

MODEL_ACTIVITY = "call_model"
"""The activity type of every model call (activities/model_call.py)."""


def model_task_queue(task_queue: str, provider: str) -> str:
    """The task queue of `provider`'s model calls for runs on `task_queue`: every worker of
    `task_queue` polls it too, with that provider's limits (worker.build_worker)."""
    return f"{task_queue}-model-{provider}"


class _StoreMiss(Exception):
    """The worker's message store lacked what a request named; the request goes again whole."""


class ModelGateway:
    def __init__(self, ctx: RunContext, budget: Budget) -> None:
        self._input = ctx.input
        self._budget = budget
        # Linear history: what the last call sent, and the chain reference naming it.
        self._last_sent: list[Message] = []
        self._last_ref = ""
        self._last_tools: list[ToolSpec] = []
        self._last_tools_ref: str | None = None
        """The reference of `_last_tools`, hashed once for as long as the tools stay the same."""
        self._stored_contents: set[str] = set()
        """Tool results and replies the workers were asked to keep (the next call names them)."""
        self._script_digest: str | None = None
        self.behaviours = ctx.behaviours
        """Set by the run from its history (see versioning)."""
        guardrails = ctx.input.guardrails
        self._deltas_withheld = guardrails is not None and bool(guardrails.output)
        """An answer's text reaches no one before the output guardrails have read it."""

    def keep_reference(self, content_ref: str) -> None:
        """A tool result or a model reply a worker stored: later requests may name it instead
        of sending it."""
        self._stored_contents.add(content_ref)

    async def reply(
        self, offered: list[ToolSpec], step: int, messages: list[Message]
    ) -> ModelResponse:
        """The model's reply to `messages` (the view of the transcript for this step)."""
        settings = self._input.model
        # Built from values validated already: validating the whole transcript again at every
        # step made a 500-step replay quadratic (0.4 ms a step at 1,000 messages).
        request = ModelRequest.model_construct(
            settings=settings,
            system=self._input.system,
            messages=messages,
            tools=offered,
            step=step,
            deltas_withheld=self._deltas_withheld,
        )
        summary = f"model {settings.model}, step {step}"
        by_reference = self._by_reference(request)
        response: ModelResponse | None = None
        if by_reference is not None:
            try:
                response = await self._execute(by_reference, summary)
            except _StoreMiss:
                workflow.logger.info("store miss at step %d: sending the whole request", step)
        if response is None:
            response = await self._execute(request, summary)
        text = response.message.content or ""
        if self.behaviours.replies_by_reference and len(text) >= history.CONTENT_MIN_CHARS:
            # The worker kept the reply's text (activities/model_call.py): the next call names
            # it, so the history holds it once, as this call's result.
            self.keep_reference(history.content_ref(text))
        # Either way the worker now holds this request: the next call may name it.
        if by_reference is not None and by_reference.prefix_ref is not None:
            new = messages[by_reference.prefix_count :]
            self._last_ref = history.chain_refs(new, self._last_ref)[-1] if new else self._last_ref
        else:
            self._last_ref = history.chain_refs(messages)[-1]
        if offered != self._last_tools:
            self._last_tools_ref = None
        self._last_sent, self._last_tools = messages, offered
        return response

    async def summary(self, system: str, prompt: Message, step: int, what: str) -> ModelResponse:
        """A model call that is not a step: a compaction's summary."""
        request = ModelRequest(
            settings=self._input.model,
            system=system,
            messages=[prompt],
            tools=[],
            step=step,
            purpose="summary",
        )
        return await self._execute(request, what)

    async def verdict(self, request: ModelRequest, what: str, within: timedelta) -> ModelResponse:
        """An auto-mode judge's call (workflows/judge.py), on its own provider's queue, given
        at most `within` in all (never more than the run's wall time leaves)."""
        return await self._execute(request, what, within)

    def _script_ref(self, script: Sequence[ScriptedTurn]) -> str:
        """The run's script never changes: hash it once, not at every step (a 3,000-turn
        script took seconds of each workflow task)."""
        if self._script_digest is None:
            self._script_digest = history.script_ref(script)
        return self._script_digest

    def _tools_ref(self) -> str:
        """The tools' JSON is hashed once, not at every step (it was 1% of a replay)."""
        if self._last_tools_ref is None:
            self._last_tools_ref = history.tools_ref(self._last_tools)
        return self._last_tools_ref

    def _by_reference(self, request: ModelRequest) -> ModelRequest | None:
        """The request with what earlier calls sent named by reference: the previous request
        when it is a prefix of this one, and any tool result a worker was asked to keep."""
        sent = self._last_sent
        if not self._input.linear_history or not sent:
            return None
        messages = request.messages
        head = messages[: len(sent)]
        # After a compaction rewrote the start, the view goes again, but its results by hash.
        extends = len(head) == len(sent) and all(map(operator.is_, sent, head))
        start = len(sent) if extends else 0
        same_tools = self._last_tools == request.tools
        script = request.settings.script
        new: list[Message] = []
        content_refs: dict[int, str] = {}
        for position, message in enumerate(messages[start:]):
            ref = ""
            if isinstance(message, ToolResult | AssistantMessage) and message.content:
                ref = history.content_ref(message.content)
            if ref in self._stored_contents:
                content_refs[position] = ref
                message = message.model_copy(update={"content": ""})
            new.append(message)
        return request.model_copy(
            update={
                "content_refs": content_refs,
                "settings": request.settings.model_copy(update={"script": []}),
                "script_ref": self._script_ref(script) if script else None,
                "prefix_ref": self._last_ref if extends else None,
                "prefix_count": start,
                "messages": new,
                "tools_ref": self._tools_ref() if same_tools else None,
                "tools": [] if same_tools else request.tools,
            }
        )

    async def _execute(
        self, request: ModelRequest, summary: str, within: timedelta | None = None
    ) -> ModelResponse:
        settings = request.settings
        deadline = left = self._budget.deadline(workflow.now())
        if within is not None and (left is None or within < left):
            deadline = within
        task_queue = None  # the run's own
        if request.purpose == "judge":
            # New with the judge: its provider's queue, a scripted judge the run's own.
            if settings.provider in ADMITTED_PROVIDERS:
                task_queue = model_task_queue(workflow.info().task_queue, settings.provider)
        elif self.behaviours.model_calls_on_provider_queues:
            task_queue = model_task_queue(workflow.info().task_queue, settings.provider)
        try:
            return await workflow.execute_activity(
                MODEL_ACTIVITY,
                request,
                task_queue=task_queue,
                result_type=ModelResponse,
                start_to_close_timeout=timedelta(seconds=settings.timeout_seconds),
                schedule_to_close_timeout=deadline,
                retry_policy=settings.retry.to_policy(FATAL_ERROR_TYPES),
                heartbeat_timeout=self._input.heartbeat_timeout,
                summary=summary,
            )
        except ActivityError as error:
            cause = error.cause
            if isinstance(cause, CancelledError) and self.behaviours.cancels_end_the_run:
                # The run was cancelled while the model (or a summary) was being asked: the run
                # ends CANCELED, after its compensations, not as a provider's failure.
                raise asyncio.CancelledError("the run was cancelled during a model call") from None
            if isinstance(cause, ApplicationError) and cause.type == history.STORE_MISS:
                raise _StoreMiss from None
            self._budget.check_spend(workflow.now())  # a wall-time cut says so, by name
            limit = self._input.limits.max_wall_seconds
            if (
                error.retry_state == RetryState.TIMEOUT
                and within is not None
                and deadline is within
            ):
                # Its own bound (a judge's), not the run's wall time.
                raise AgentProviderError(
                    f"no answer within {within.total_seconds():g} s, retries included (its last "
                    f"failure: {describe_failure(cause)})",
                    self._budget.details(),
                ) from None
            if error.retry_state == RetryState.TIMEOUT and limit is not None:
                # The schedule-to-close timeout is what was left of max_wall_seconds: the
                # retries ran out of the run's time, which is the budget's failure.
                raise AgentBudgetExceeded(
                    f"max_wall_seconds={limit:g} ran out while the model call was being "
                    f"retried; its last failure: {describe_failure(cause)}",
                    self._budget.details(),
                ) from None
            if isinstance(cause, ApplicationError) and cause.type in FATAL_ERROR_TYPES:
                raise error_class(cause.type)(cause.message, self._budget.details()) from None
            raise AgentProviderError(
                f"model call failed after its retries: {describe_failure(cause)}",
                self._budget.details(),
            ) from None
