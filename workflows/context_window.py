"""The context window: keep what the model is sent within max_context_tokens.

Before each model call it estimates the context; over the limit (and with compaction on) it
shrinks the view by whole groups (workflows/compaction.py chooses the cut), dropping them or
having the model summarise them, and records both sides of the trade: the tokens freed and,
once the next call has answered, the prefix cache it lost. The transcript itself never changes.
"""

from __future__ import annotations

from temporalio import workflow

from . import compaction
from .activity_io import ModelResponse
from .budget import Budget, estimate_message_tokens
from .context import RunContext
from .model_gateway import ModelGateway
from .reporting import Reporter
from .specs import ToolSpec
from .state import CompactionRecord
from .transcript import Message, UserMessage


class ContextWindow:
    def __init__(
        self,
        ctx: RunContext,
        budget: Budget,
        gateway: ModelGateway,
        reporter: Reporter,
    ) -> None:
        self._input = ctx.input
        self._state = ctx.state
        self._budget = budget
        self._gateway = gateway
        self._reporter = reporter

    def view(self) -> list[Message]:
        """What the model is sent: messages[0], the note, then messages[cut:]."""
        state = self._state
        return compaction.view(state.messages, state.cut, state.note)

    def estimate(self, offered: list[ToolSpec], sent_until: int) -> int:
        return self._budget.context_estimate(
            self._input.system, offered, self.view(), self._state.messages[sent_until:]
        )

    async def fit(self, offered: list[ToolSpec], sent_until: int, step: int) -> int:
        """The context the next call will send, compacted first when it is over the limit."""
        context = self.estimate(offered, sent_until)
        limit = self._input.limits.max_context_tokens
        if limit is not None and context > limit and self._input.compaction != "none":
            target = int(limit * self._input.compaction_target_ratio)
            if await self._compact(context - target, step):
                context = self.estimate(offered, sent_until)
        return context

    def account_cache_loss(self, response: ModelResponse, previous_input: int) -> None:
        """The first call after a compaction: how much of the previous call's prefix, which an
        append-only transcript would have let the cache serve, it did not read from cache."""
        for record in self._state.compactions:
            if record.cached_tokens_lost is None:
                lost = max(previous_input - response.usage.cached_input_tokens, 0)
                record.cached_tokens_lost = lost

    async def _compact(self, tokens_to_free: int, step: int) -> bool:
        """Shrink the view sent to the model by whole groups; False when it cannot."""
        state = self._state
        messages = state.messages
        previous_note = state.note.content if state.note else ""
        # The note is rewritten, so what it held is freed too and must not be counted twice.
        cut = compaction.choose_cut(messages, state.cut, tokens_to_free)
        if cut is None:
            return False
        removed = messages[state.cut : cut]
        policy = self._input.compaction
        if policy == "summary":
            summary = await self._summarise(removed, step)
            note = f"[{cut - 1} earlier messages summarised]\n{summary}"
        else:
            note = f"[{cut - 1} earlier messages dropped to fit the context window]"
        freed = (
            estimate_message_tokens(removed)
            + estimate_message_tokens([UserMessage(content=previous_note)]) * bool(previous_note)
            - estimate_message_tokens([UserMessage(content=note)])
        )
        state.cut, state.note = cut, UserMessage(content=note)
        self._budget.forget_reported_context()
        record = CompactionRecord(
            step=step,
            policy="summary" if policy == "summary" else "window",
            messages_removed=cut - 1,
            tokens_removed=freed,
        )
        state.compactions.append(record)
        workflow.logger.info("compaction before step %d: %s, %d messages", step, policy, cut - 1)
        self._reporter.publish("compaction", outcome=record.policy, text=note.split("\n")[0])
        return True

    async def _summarise(self, removed: list[Message], step: int) -> str:
        note = self._state.note
        previous = note.content.split("\n", 1)[-1] if note else None
        prompt = UserMessage(content=compaction.render_for_summary(removed, previous))
        response = await self._gateway.summary(
            compaction.SUMMARY_SYSTEM, prompt, step, f"summarise {len(removed)} messages"
        )
        self._budget.record_side_call(response.usage)
        return response.message.content or ""
