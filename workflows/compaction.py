"""Pair-safe compaction: shrink what the model is sent without ever splitting a tool-call group.

Messages are not independently droppable. An assistant message and all of its tool
results go together or not at all, and the first user message (the task) always stays. The full
transcript is never edited: compaction only chooses the *view* sent to the model, which is

    [the first message] + [a visible note] + messages[cut:]

where `cut` is always the start of a group. The note says what happened ("[N earlier messages
summarised]"), so a change of behaviour after it can be traced to it.

Pure and deterministic: the summary itself comes from a model activity the workflow calls.
"""

from __future__ import annotations

from .budget import estimate_message_tokens
from .transcript import (
    AssistantMessage,
    Message,
    ToolResult,
    Transcript,
    UserMessage,
)

SUMMARY_SYSTEM = (
    "You compress the middle of an agent's working transcript so that it can go on with less "
    "context. Keep every fact, id, number, decision and open question it will need; drop "
    "pleasantries and repetition. Answer with the summary only, as short plain text."
)


def group_starts(messages: list[Message]) -> list[int]:
    """Indices (after the first message) where a group starts: an assistant message with its
    results, or a user message. Only these are places where a view may begin."""
    return [i for i, m in enumerate(messages) if i > 0 and not isinstance(m, ToolResult)]


def choose_cut(messages: list[Message], current_cut: int, tokens_to_free: int) -> int | None:
    """The smallest group start past `current_cut` that frees at least `tokens_to_free`, keeping
    the newest group; None when even that is not enough."""
    # Never past the newest group's start: the model must see at least its latest exchange.
    for cut in [i for i in group_starts(messages) if i > current_cut]:
        if estimate_message_tokens(messages[current_cut:cut]) >= tokens_to_free:
            return cut
    return None


def view(messages: list[Message], cut: int, note: UserMessage | None) -> list[Message]:
    """What the model is sent; checked against the pairing rule before it leaves."""
    if note is None:
        return list(messages)
    sent = [messages[0], note, *messages[cut:]]
    Transcript(messages=sent)  # raises if a group was split: never send that to a provider
    return sent


def render_for_summary(messages: list[Message], previous_summary: str | None) -> str:
    """The part to summarise, as plain text a summariser can read."""
    lines = []
    if previous_summary:
        lines.append(f"(Summary of what came before)\n{previous_summary}")
    for message in messages:
        if isinstance(message, UserMessage):
            lines.append(f"USER: {message.content}")
        elif isinstance(message, AssistantMessage):
            if message.content:
                lines.append(f"ASSISTANT: {message.content}")
            for call in message.tool_calls:
                lines.append(f"ASSISTANT CALLS {call.name}({call.arguments}) [{call.id}]")
        else:
            error = " (error)" if message.is_error else ""
            lines.append(
                f"RESULT of {message.tool_name} [{message.tool_call_id}]{error}: {message.content}"
            )
    return "\n".join(lines)
