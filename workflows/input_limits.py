"""Bounds on what a person or an app sends a run: its input, messages, plan comments, denial
reasons.

Each of these is written to the run's event history when it is taken (an update's accepted event
carries its input), and again in the model call that first sends it, and it stays in the
transcript the run carries on. Temporal refuses a payload over 2 MB and terminates a run whose
history passes 50 MB, so without bounds a flood of large messages can kill a run in the middle
of a turn, with its side effects never undone. An update over a bound is refused by its
validator, before anything is written; the client and the CLI refuse it before sending.
Deterministic code only.
"""

from __future__ import annotations

from pydantic import BaseModel

from .outcomes import count

MAX_MESSAGE_CHARS = 32_000
"""A conversation's message, and a plan's comment or feedback (the model reads it as the
person's message), in characters: about 8,000 tokens, a long pasted email or log excerpt. At
most 128 KB in UTF-8 (192 KB as JSON-escaped control characters), far under Temporal's 2 MB
payload limit, so that it fits whole in the update that brings it and in the model call that
first sends it."""
MAX_QUEUED_MESSAGE_BYTES = 256_000
"""The messages that wait for the working turn's next safe point, in UTF-8 bytes, all together:
eight long messages. The model reads them all at its next call, so more would not fit a context
window anyway (256 KB is about 64,000 tokens), and between two safe points the history grows by
at most this much, twice (the updates, the model call), whatever is sent: a fifth of what warns
at 10 MB, a hundredth of the 50 MB that terminates a run. One more is refused until the turn
has taken them."""
MAX_REASON_CHARS = 2_000
"""The reason a person gives with a tool call's decision, in characters: a paragraph. The model
reads it in the call's error result, and the run keeps it with every decided call (the `status`
query shows them) and with a remembered decision."""
MAX_INPUT_BYTES = 1_800_000
"""A run's input as JSON: when it starts, and whenever it continues as new, carrying its state
(workflows/continuation.py). One rule for both, so a run that may start may also hand on: under
Temporal's 2 MB payload limit, with room for the encoding around it. The prompt counts once (a
continued run carries it in its transcript, not in `prompt` again); a document too large for
it is better read by a tool than pasted into the prompt."""
QUOTED_ID_CHARS = 100
"""A call id quoted back in a refusal: an id longer than any the run gives is named by its start."""

TOO_LARGE = "AgentInputTooLarge"
"""The type of the error an update's validator (and the client) refuses input over a bound with,
so a caller can tell it from a decision the run cannot take now (refusals.REFUSED)."""


class InputTooLarge(ValueError):
    """Input over one of this module's bounds; its message says which and what to do, and
    `subject` names the input as the message does ("the message", "the reason")."""

    def __init__(self, message: str, subject: str) -> None:
        super().__init__(message)
        self.subject = subject


def check_message(text: str) -> None:
    _check(
        text, "message", MAX_MESSAGE_CHARS, "MAX_MESSAGE_CHARS", "shorten it, or send it in parts"
    )


def check_comment(comment: str | None) -> None:
    _check(comment, "comment", MAX_MESSAGE_CHARS, "MAX_MESSAGE_CHARS", "shorten it")


def check_reason(reason: str | None) -> None:
    _check(reason, "reason", MAX_REASON_CHARS, "MAX_REASON_CHARS", "shorten it")


def json_bytes(model: BaseModel) -> int:
    """A model's size as its JSON payload has it: UTF-8 bytes."""
    return len(model.model_dump_json().encode())


def check_input(size: int, prompt_chars: int) -> None:
    """Whether a run's input of `size` bytes as JSON, `prompt_chars` of them its prompt, may
    start a run (MAX_INPUT_BYTES)."""
    if size > MAX_INPUT_BYTES:
        raise InputTooLarge(
            f"the run's input is {size:,} bytes as JSON, its prompt {prompt_chars:,} characters "
            f"of them; a run's input may have {MAX_INPUT_BYTES:,} (MAX_INPUT_BYTES), when it "
            "starts and whenever it continues as new: shorten the prompt, or give the agent a "
            "tool that reads the document",
            "the run's input",
        )


def check_queue(waiting: list[str], text: str, turn: int) -> None:
    """Whether `text` may join the messages that wait for turn `turn` to take them."""
    held = sum(len(message.encode()) for message in waiting)
    size = len(text.encode())
    if held + size > MAX_QUEUED_MESSAGE_BYTES:
        raise InputTooLarge(
            f"{count(len(waiting), 'message')} wait for turn {turn} to take them, {held:,} "
            f"bytes; this one ({size:,} bytes) would take them over "
            f"{MAX_QUEUED_MESSAGE_BYTES:,} bytes (MAX_QUEUED_MESSAGE_BYTES): send it once the "
            "turn has taken them, at its next model call",
            "the message",
        )


def quoted_id(call_id: str) -> str:
    """A call id as a refusal quotes it: whole, or its start when it is longer than any id."""
    if len(call_id) <= QUOTED_ID_CHARS:
        return repr(call_id)
    return f"{call_id[:QUOTED_ID_CHARS]!r}... ({len(call_id):,} characters)"


def _check(text: str | None, what: str, limit: int, name: str, advice: str) -> None:
    if text is not None and len(text) > limit:
        raise InputTooLarge(
            f"the {what} is {len(text):,} characters; a {what} may have {limit:,} ({name}): "
            f"{advice}",
            f"the {what}",
        )
