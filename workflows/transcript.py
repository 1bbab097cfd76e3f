"""The provider-neutral transcript and the pairing rule that keeps it valid.

An assistant message with n tool calls must be followed by exactly n tool results carrying the
matching ids, in call order, before any other message. Providers reject anything else with a 400
(seed 000), so the rule is enforced here, at append time, not discovered at the next model call.
Messages are frozen and the transcript only grows: nothing is ever edited in place.

Pure data and pure functions: imported by the workflow (deterministic) and by activities alike.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator


class TranscriptError(ValueError):
    """An append (or a loaded transcript) would break the tool-call pairing rule."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool call requested by the model."""

    id: str
    """The provider's call id; the result must carry the same id."""
    name: str
    """The tool's name as the model wrote it (it may name a tool that does not exist)."""
    arguments: str
    """The arguments exactly as the model produced them: a JSON text that may be invalid."""


class UserMessage(_Frozen):
    role: Literal["user"] = "user"
    content: str


class AssistantMessage(_Frozen):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    """Text the model wrote; may stand beside tool calls."""
    tool_calls: tuple[ToolCall, ...] = ()


class ToolResult(_Frozen):
    role: Literal["tool"] = "tool"
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    """True when the call failed, was refused or was not run; the model still gets the text."""


Message = Annotated[UserMessage | AssistantMessage | ToolResult, Field(discriminator="role")]
message_adapter: TypeAdapter[Message] = TypeAdapter(Message)


def pending_calls(messages: list[Message] | tuple[Message, ...]) -> list[ToolCall]:
    """The calls of the last assistant message that still wait for their result, in call order."""
    answered = 0
    for message in reversed(messages):
        if isinstance(message, ToolResult):
            answered += 1
        elif isinstance(message, AssistantMessage):
            return list(message.tool_calls[answered:])
        else:
            return []
    return []


def check_append(messages: list[Message] | tuple[Message, ...], message: Message) -> None:
    """Raise TranscriptError if appending `message` would break the pairing rule."""
    waiting = pending_calls(messages)
    if isinstance(message, ToolResult):
        if not waiting:
            raise TranscriptError(
                f"tool result for unknown id {message.tool_call_id!r}: "
                "no tool call is waiting for a result"
            )
        expected = waiting[0]
        if message.tool_call_id != expected.id:
            known = {call.id for call in waiting}
            what = "out of call order" if message.tool_call_id in known else "unknown id"
            raise TranscriptError(
                f"tool result for {what} {message.tool_call_id!r}: the next result must answer "
                f"{expected.id!r} ({expected.name}); still missing: "
                + ", ".join(repr(call.id) for call in waiting)
            )
        return
    if waiting:
        raise TranscriptError(
            f"cannot append a {message.role} message: tool calls still missing their results: "
            + ", ".join(f"{call.id!r} ({call.name})" for call in waiting)
        )
    if not messages and not isinstance(message, UserMessage):
        raise TranscriptError("a transcript starts with the user's message")
    if isinstance(message, AssistantMessage):
        ids = [call.id for call in message.tool_calls]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise TranscriptError(f"tool call ids repeat within one message: {duplicates}")
        if any(not i for i in ids):
            raise TranscriptError("a tool call has an empty id")


class Transcript(BaseModel):
    """The run's messages, appended only through `append`, which enforces the pairing rule."""

    messages: list[Message] = []

    @model_validator(mode="after")
    def _check_sequence(self) -> Transcript:
        # A transcript loaded from history or built by hand obeys the same rule as one grown here.
        for index, message in enumerate(self.messages):
            check_append(self.messages[:index], message)
        return self

    def append(self, message: Message) -> None:
        check_append(self.messages, message)
        self.messages.append(message)

    def pending_calls(self) -> list[ToolCall]:
        return pending_calls(self.messages)

    def is_complete(self) -> bool:
        """True when every tool call has its result: the transcript can be sent to a provider."""
        return not self.pending_calls()
