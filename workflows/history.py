"""Linear history: a model call carries a reference for what earlier calls already sent.

Each model activity's input used to carry the whole transcript, so the event history grew with
the square of the steps. Instead, the workflow names the messages an earlier call already sent
by one reference, the head of a hash chain (`ref_k = H(ref_{k-1} + message_k)`), and sends only
what is new; the tool schemas likewise go by the hash of their JSON. The worker keeps what it saw
in a store keyed by these hashes. The store is only a cache: on a miss the activity fails, and
the workflow sends the whole request again, so the history stays the source of truth.

Pure and deterministic: the same messages always give the same references.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from .transcript import Message

STORE_MISS = "MessageStoreMiss"
"""Error type of a model activity whose store lacks what a reference names."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def message_json(message: Message) -> str:
    return json.dumps(message.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def chain_refs(messages: Sequence[Message], parent: str = "") -> list[str]:
    """The chain reference after each message: refs[i] names messages[: i + 1]."""
    refs = []
    for message in messages:
        parent = _digest(parent + message_json(message))
        refs.append(parent)
    return refs


def tools_json(tools: Sequence[Any]) -> str:
    return json.dumps([t.model_dump(mode="json") for t in tools], sort_keys=True)


def tools_ref(tools: Sequence[Any]) -> str:
    return "tools-" + _digest(tools_json(tools))


def script_json(script: Sequence[Any]) -> str:
    return json.dumps([turn.model_dump(mode="json") for turn in script], sort_keys=True)


def script_ref(script: Sequence[Any]) -> str:
    return "script-" + _digest(script_json(script))


CONTENT_MIN_CHARS = 256
"""Tool results shorter than this go in full: a reference would save next to nothing."""


def content_ref(content: str) -> str:
    return "content-" + _digest(content)
