"""The compensation log's bounds: what an entry keeps, and the compact form the log travels in.

A compensation needs to find the effect it undoes and to know what was asked: the tool, the
call id, the idempotency key and the arguments. It does not need the tool's value, which may
be megabytes (nine 250 KB values once made a result the server refused). So an entry keeps
the arguments and the value only up to MAX_KEPT_ARGUMENT_CHARS and MAX_KEPT_RESULT_CHARS of
JSON; over that, it keeps neither, says so (`arguments_kept`, `result_kept`), and the
compensation finds the effect by its key.

The log travels (continue-as-new's carried state, the result a parent adopts) in a compact
form: one JSON array per entry, the run's own key prefix written once. A run whose log has
reached MAX_LOG_BYTES (its entries' compact JSON, keys counted without the run's own
prefix) makes no more side effects: a call that changes data is refused, with
the reason, rather than applied with no room to undo it. Deterministic data only.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

MAX_KEPT_ARGUMENT_CHARS = 2_000
"""An effect's arguments are kept for its compensation up to this size (as JSON)."""
MAX_KEPT_RESULT_CHARS = 2_000
"""And the tool's return value up to this size (activities/tools.py keeps no more either)."""
MAX_LOG_BYTES = 600_000
"""The log's size at most (its entries' compact JSON, the keys written whole): thousands of
effects, so that the carried state and the result stay under Temporal's 2 MB limits. A side
effect that would start past it is refused."""

PACKED = "packed_effects"
"""The compact form's tag (its version)."""
_CALL_UNKNOWN, _EFFECT_UNKNOWN, _ARGUMENTS_DROPPED, _RESULT_DROPPED = 1, 2, 4, 8


def json_chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def bounded_call(call: dict[str, Any]) -> dict[str, Any]:
    """A compensation input (as JSON data) without arguments or a value over their bounds."""
    call = dict(call)
    if call.get("arguments_kept", True) and json_chars(call["arguments"]) > MAX_KEPT_ARGUMENT_CHARS:
        call["arguments"], call["arguments_kept"] = {}, False
    if call.get("result") is not None and json_chars(call["result"]) > MAX_KEPT_RESULT_CHARS:
        call["result"], call["result_kept"] = None, False
    return call


def key_prefix(key: str, call_id: str) -> str:
    """What a key has before its call id: the run's own part, the same for all its calls."""
    return key[: -len(call_id)] if key.endswith(call_id) else ""


def entry_bytes(effect: dict[str, Any], own_prefix: str) -> int:
    """What one entry adds to the log in its compact form, a key that starts with the run's
    own prefix counted without it (the form writes the prefix once)."""
    return json_chars(_entry(effect, own_prefix)) + 1


def pack(effects: list[dict[str, Any]]) -> dict[str, Any]:
    """The compact form of a log (entries as `AppliedEffect` JSON data)."""
    prefixes = Counter(
        key_prefix(e["call"]["idempotency_key"], e["call"]["tool_call_id"]) for e in effects
    )
    prefix = prefixes.most_common(1)[0][0] if prefixes else ""
    return {PACKED: 1, "key_prefix": prefix, "entries": [_entry(e, prefix) for e in effects]}


def unpack(value: Any) -> Any:
    """Entries as `AppliedEffect` JSON data, from the compact form; anything else (the list
    of entries older runs carried) as it came."""
    if not (isinstance(value, dict) and PACKED in value):
        return value
    prefix = value["key_prefix"]
    effects = []
    for tool, call_id, arguments, result, key, compensation, flags in value["entries"]:
        effects.append(
            {
                "call": {
                    "tool": tool,
                    "tool_call_id": call_id,
                    "arguments": arguments,
                    "result": result,
                    "idempotency_key": key or prefix + call_id,
                    "outcome_unknown": bool(flags & _CALL_UNKNOWN),
                    "arguments_kept": not flags & _ARGUMENTS_DROPPED,
                    "result_kept": not flags & _RESULT_DROPPED,
                },
                "compensation": compensation,
                "outcome_unknown": bool(flags & _EFFECT_UNKNOWN),
            }
        )
    return effects


def _entry(effect: dict[str, Any], prefix: str) -> list[Any]:
    call = effect["call"]
    key = call["idempotency_key"]
    flags = (
        (_CALL_UNKNOWN if call.get("outcome_unknown") else 0)
        | (_EFFECT_UNKNOWN if effect.get("outcome_unknown") else 0)
        | (0 if call.get("arguments_kept", True) else _ARGUMENTS_DROPPED)
        | (0 if call.get("result_kept", True) else _RESULT_DROPPED)
    )
    short = "" if prefix and key == prefix + call["tool_call_id"] else key
    return [
        call["tool"],
        call["tool_call_id"],
        call["arguments"],
        call.get("result"),
        short,
        effect.get("compensation"),
        flags,
    ]
