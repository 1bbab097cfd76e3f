"""The provider-neutral transcript and the pairing rule that keeps it valid.

An assistant message with n tool calls must be followed by exactly n tool results carrying the
matching ids, in call order, before any other message. Providers reject anything else with a 400
, so the rule is enforced here, at append time, not discovered at the next model call.
Messages are frozen and the transcript only grows: nothing is ever edited in place.

An assistant message may also hold the model's reasoning (`ReasoningPart`): opaque, tagged with
the provider and API that made it, kept byte for byte. It goes back to that provider only
(`reasoning_for`): Anthropic refuses a tool-use turn without its signed thinking, OpenAI's
stateless Responses API an item whose encrypted reasoning is gone. Another provider never sees it.
So do the fields a provider asks to have sent back with the items its text came in (`TextItem`:
the Responses API's `phase`).

Pure data and pure functions: imported by the workflow (deterministic) and by activities alike.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from .bounds import Count


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


class ReasoningPart(_Frozen):
    """The model's reasoning as its provider sent it: an Anthropic `thinking` or
    `redacted_thinking` block, an OpenAI Responses `reasoning` item. Never read, never edited:
    the provider checks its signature (or decrypts it) when it comes back."""

    provider: str
    """The provider that made it ("anthropic", "openai-responses"): only it is sent the part."""
    api: str
    """The API within the provider ("messages", "responses")."""
    model: str
    """The model that wrote it, for the trace."""
    kind: str
    """The block's or item's type: "thinking", "redacted_thinking", "reasoning"."""
    data: str
    """The block or item as JSON text, every field as the provider sent it."""
    position: Count = 0
    """Where it stood in the reply: the number of the message's items before it, counting its
    text (when it has any) as one item placed where its first text block was, then each tool
    call. A provider gets its parts back in the order it wrote them."""


class TextItem(_Frozen):
    """One item a reply's text came in, kept when its provider asks to have fields of it sent
    back that the text alone does not carry: the Responses API's `phase` of an assistant
    message ("commentary" or "final_answer"), which its newer models read on every later
    request ("dropping it can degrade performance"). The text itself is the message's
    `content`; this holds the item's share of it and those fields, for the provider and API
    that made them only."""

    provider: str
    """The provider that made it ("openai-responses"): only it is sent the fields."""
    api: str
    """The API within the provider ("responses")."""
    chars: Count
    """How many characters of the message's content the item held, the items in reply order."""
    fields: str
    """The fields to send back with the item, as a JSON object text: {"phase":"commentary"}."""


class UserMessage(_Frozen):
    role: Literal["user"] = "user"
    content: str


class AssistantMessage(_Frozen):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    """Text the model wrote; may stand beside tool calls."""
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[ReasoningPart, ...] = Field(default=(), exclude_if=lambda parts: not parts)
    """The model's reasoning before (and between) its text and calls, for the provider that
    made it. Left out of the JSON when there is none, so messages without reasoning keep the
    bytes (and the linear-history references) they always had."""
    text_items: tuple[TextItem, ...] = Field(default=(), exclude_if=lambda items: not items)
    """The items the text came in, when its provider asks to have fields of them sent back
    (see TextItem). Left out of the JSON when there are none, as `reasoning` is."""


class ToolResult(_Frozen):
    role: Literal["tool"] = "tool"
    tool_call_id: str
    tool_name: str
    content: str
    is_error: bool = False
    """True when the call failed, was refused or was not run; the model still gets the text."""


Message = Annotated[UserMessage | AssistantMessage | ToolResult, Field(discriminator="role")]
message_adapter: TypeAdapter[Message] = TypeAdapter(Message)


ReplyItem = ReasoningPart | str | ToolCall
"""One item of an assistant message in reply order: a reasoning part, its text, a tool call."""


def reply_items(message: AssistantMessage) -> list[ReplyItem]:
    """The message's reasoning parts, text and calls in the order the model wrote them."""
    items: list[str | ToolCall] = [message.content] if message.content else []
    items += message.tool_calls
    ordered: list[ReplyItem] = []
    parts = sorted(message.reasoning, key=lambda part: part.position)  # stable: same-place order
    for index, item in enumerate(items):
        ordered += [part for part in parts if part.position == index]
        ordered.append(item)
    ordered += [part for part in parts if part.position >= len(items)]
    return ordered


def reasoning_for(
    message: AssistantMessage, provider: str, api: str, *, accepted: bool = True
) -> tuple[list[ReplyItem], int]:
    """The message's items as `provider`'s `api` may be sent them, and how many reasoning
    parts were left out: those another provider (or API) made, and all of them when the call
    does not accept reasoning (Anthropic with thinking off refuses thinking blocks)."""
    items: list[ReplyItem] = []
    left_out = 0
    for item in reply_items(message):
        if isinstance(item, ReasoningPart) and not (
            accepted and item.provider == provider and item.api == api
        ):
            left_out += 1
            continue
        items.append(item)
    return items, left_out


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
