"""Call ids: every call of a run has its own, in bounded state however long the run.

An id is the key of a call's result and of its idempotency key, so a repeat is renamed
(dispatch.with_unique_call_ids). The run remembers its newest ids exactly and the older ones in
a Bloom filter of fixed size: a filter never forgets an id it was given, so no repeat goes
through; now and then it holds one it was never given, and that call is renamed needlessly,
which costs nothing. Deterministic data only: the filter is bits in the run's state.
"""

from __future__ import annotations

import base64
import hashlib

from .state import CALL_ID_FILTER_BYTES, RunState

MAX_EXACT_CALL_IDS = 2_000
"""The newest ids, kept as they are; older ones go into the filter."""
FILTER_BITS = CALL_ID_FILTER_BYTES * 8
"""32 KiB of filter (44 KB in the carried JSON): about 1% false positives at 27,000 older ids."""
FILTER_HASHES = 5


class CallIds:
    """The ids of a run's calls so far, over `state.call_ids` (newest) and
    `state.older_call_ids` (the filter, base64), which continue-as-new carries."""

    def __init__(self, state: RunState, *, bounded: bool = False) -> None:
        self._state = state
        self._exact = set(state.call_ids)
        self._filter = (
            bytearray(base64.b64decode(state.older_call_ids)) if state.older_call_ids else None
        )
        self.bounded = bounded
        """Move ids past MAX_EXACT_CALL_IDS into the filter (set by the run from its history:
        see versioning.Behaviours.bounded_state)."""

    def __contains__(self, call_id: object) -> bool:
        if not isinstance(call_id, str):
            return False
        if call_id in self._exact:
            return True
        return self._filter is not None and all(
            self._filter[bit // 8] & (1 << bit % 8) for bit in _bits(call_id)
        )

    def add(self, call_ids: list[str]) -> None:
        ids = self._state.call_ids
        ids.extend(call_ids)
        self._exact.update(call_ids)
        overflow = len(ids) - MAX_EXACT_CALL_IDS
        if not self.bounded or overflow <= 0:
            return
        if self._filter is None:
            self._filter = bytearray(FILTER_BITS // 8)
        for old in ids[:overflow]:
            for bit in _bits(old):
                self._filter[bit // 8] |= 1 << bit % 8
            self._exact.discard(old)
        del ids[:overflow]
        self._state.older_call_ids = base64.b64encode(self._filter).decode("ascii")


def _bits(call_id: str) -> list[int]:
    digest = hashlib.sha256(call_id.encode("utf-8")).digest()
    return [
        int.from_bytes(digest[4 * i : 4 * i + 4], "big") % FILTER_BITS for i in range(FILTER_HASHES)
    ]
