"""Loop detection: the same call made again and again is fed back, not executed."""

from __future__ import annotations

import hashlib
import json

MAX_IDENTICAL_CALLS = 2
"""A call already made this many times with the same arguments is not executed again."""


MAX_REMEMBERED_CALLS = 5_000
"""Distinct calls whose counts the run keeps (the most recently made): a call repeated after
5,000 others counts from one again, and the carried counts stay bounded however long the run."""


def call_key(name: str, arguments: str) -> str:
    """A hash of (tool name, canonical JSON of the arguments): key order and spacing do not
    matter, and a key is 16 characters whatever the size of the arguments."""
    try:
        canonical = json.dumps(
            json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except (ValueError, RecursionError):
        canonical = arguments
    return _hashed(f"{name}\n{canonical}")


def _hashed(plain_key: str) -> str:
    return hashlib.sha256(plain_key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class LoopDetector:
    def __init__(self, counts: dict[str, int] | None = None, *, bounded: bool = False) -> None:
        self.counts: dict[str, int] = {} if counts is None else counts
        """By call_key, least recently made first; the run's state holds it, so it goes along
        on continue-as-new."""
        # Counts carried by a run from before the keys were hashed are keyed by the plain
        # (name, arguments) text, which always holds a newline: hash them in place, in order.
        if any("\n" in key for key in self.counts):
            carried = list(self.counts.items())
            self.counts.clear()
            for key, times in carried:
                hashed = _hashed(key) if "\n" in key else key
                self.counts[hashed] = self.counts.get(hashed, 0) + times
        self.bounded = bounded
        """Forget the least recently made calls past MAX_REMEMBERED_CALLS (set by the run from
        its history: see versioning.Behaviours.bounded_state)."""

    def record(self, name: str, arguments: str) -> int:
        """Count this call and return how many times it has now been made, this one included."""
        key = call_key(name, arguments)
        times = self.counts.pop(key, 0) + 1
        self.counts[key] = times
        while self.bounded and len(self.counts) > MAX_REMEMBERED_CALLS:
            del self.counts[next(iter(self.counts))]
        return times

    @staticmethod
    def is_loop(times: int) -> bool:
        return times > MAX_IDENTICAL_CALLS

    @staticmethod
    def feedback(name: str, times: int) -> str:
        return (
            f"You have called {name} with these arguments {times} times and received the same "
            "result. This call was not run again. Try a different approach, or explain what is "
            "blocking you."
        )
