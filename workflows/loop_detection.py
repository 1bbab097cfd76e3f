"""Loop detection (seed 000): the same call made again and again is fed back, not executed."""

from __future__ import annotations

import json

MAX_IDENTICAL_CALLS = 2
"""A call already made this many times with the same arguments is not executed again."""


def call_key(name: str, arguments: str) -> str:
    """(tool name, canonical JSON of the arguments): key order and spacing do not matter."""
    try:
        canonical = json.dumps(
            json.loads(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
    except (ValueError, RecursionError):
        canonical = arguments
    return f"{name}\n{canonical}"


class LoopDetector:
    def __init__(self, counts: dict[str, int] | None = None) -> None:
        self.counts: dict[str, int] = {} if counts is None else counts
        """By call_key; the run's state holds it, so it goes along on continue-as-new."""

    def record(self, name: str, arguments: str) -> int:
        """Count this call and return how many times it has now been made, this one included."""
        key = call_key(name, arguments)
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]

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
