"""Tools that make the loop's rules observable: concurrency, order, retries, failures, size."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter, defaultdict

import durable_agent.demo.tools  # noqa: F401  (the tests run the demo's tools too)
from durable_agent.activities.tools import ToolError, current_call, tool
from durable_agent.workflows.errors import AgentFatalToolError
from durable_agent.workflows.specs import RetrySettings
from durable_agent.workflows.state import CompensationInput

FAST_RETRY = RetrySettings(maximum_attempts=3, initial_interval_seconds=0.05, backoff_coefficient=1)

events: list[tuple[str, str]] = []
"""(start|end, label) in the order the calls really ran."""
executions: Counter[str] = Counter()
_arrivals: defaultdict[str, set[str]] = defaultdict(set)


@tool(retry=FAST_RETRY)
async def rendezvous(group: str, party: str) -> str:
    """Wait up to 3 seconds for another party of the same group; says whether they met."""
    _arrivals[group].add(party)
    deadline = time.monotonic() + 3
    while len(_arrivals[group]) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return "met" if len(_arrivals[group]) >= 2 else "alone"


async def _log(label: str) -> str:
    events.append(("start", label))
    await asyncio.sleep(0.05)
    events.append(("end", label))
    return f"done {label}"


@tool(retry=FAST_RETRY)
async def read_thing(label: str) -> str:
    """Read-only: logs when it starts and ends."""
    return await _log(label)


@tool(side_effects=True, retry=FAST_RETRY)
async def write_thing(label: str) -> str:
    """Side-effecting: logs when it starts and ends."""
    return await _log(label)


@tool(retry=FAST_RETRY)
def count_me(key: str) -> str:
    """Counts its executions per key (a sync tool: runs in a thread)."""
    executions[key] += 1
    return f"{key} has run {executions[key]} times"


@tool(retry=FAST_RETRY)
def flaky(key: str, failures: int) -> str:
    """Fails `failures` times per key, then succeeds."""
    executions[f"flaky:{key}"] += 1
    if executions[f"flaky:{key}"] <= failures:
        raise ConnectionError(f"flaky {key} attempt {executions[f'flaky:{key}']}")
    return f"ok after {executions[f'flaky:{key}']} attempts"


@tool(retry=FAST_RETRY, errors_to_model=())
def always_fails(secret: str) -> str:
    """Always raises, with a message the model must never see (it opts out of passing a
    ValueError's message on, so it is reduced to its type like any unexpected exception)."""
    raise ValueError(f"internal detail {secret}")


@tool(retry=FAST_RETRY)
def bad_credential() -> str:
    """Raises the project's fatal error."""
    raise AgentFatalToolError("the API key for the billing system was revoked")


@tool(timeout_seconds=0.3, retry=RetrySettings(maximum_attempts=1))
async def hang(seconds: float) -> str:
    """Sleeps longer than its timeout."""
    await asyncio.sleep(seconds)
    return "woke up"


@tool(retry=FAST_RETRY, max_result_chars=200)
def big_text(size: int) -> str:
    """Returns HEAD, `size` filler characters and TAIL."""
    return "HEAD" + "x" * size + "TAIL"


@tool(retry=FAST_RETRY)
def typed(order_id: int, note: str, rush: bool = False) -> dict[str, object]:
    """Echoes typed arguments."""
    return {"order_id": order_id, "note": note, "rush": rush}


@tool(retry=FAST_RETRY)
def blob(size: int) -> str:
    """Returns `size` characters."""
    return "y" * size


keys_seen: list[tuple[str, str, int]] = []
"""(label, idempotency key, attempt) for every attempt of `keyed_effect`."""
undone: list[str] = []


def undo_keyed_effect(undo: CompensationInput) -> str:
    undone.append(undo.result["label"])
    return f"undid {undo.result['label']}"


@tool(side_effects=True, retry=FAST_RETRY, compensation=undo_keyed_effect)
def keyed_effect(label: str, fail_first: bool = False) -> dict[str, str]:
    """Side-effecting: records its idempotency key per attempt; can fail its first attempt."""
    call = current_call()
    keys_seen.append((label, call.idempotency_key, call.attempt))
    if fail_first and call.attempt == 1:
        raise ConnectionError("first attempt fails")
    return {"label": label}


def undo_that_fails(undo: CompensationInput) -> str:
    raise RuntimeError("the undo service is down")


@tool(
    side_effects=True,
    retry=FAST_RETRY,
    compensation=undo_that_fails,
    compensation_retry=RetrySettings(maximum_attempts=2, initial_interval_seconds=0.05),
)
def doomed_effect(label: str) -> dict[str, str]:
    """Side-effecting, with a compensation that always fails."""
    return {"label": label}


@tool(timeout_seconds=60, retry=RetrySettings(maximum_attempts=1))
async def block(seconds: float) -> str:
    """Waits, within its timeout: something to cancel in the middle of."""
    await asyncio.sleep(seconds)
    return "woke up"


@tool(retry=FAST_RETRY, max_result_chars=1_000_000)
def huge(size: int) -> str:
    """Returns `size` characters, under a bound large enough to let them all through."""
    return "z" * size


release_blocked = threading.Event()
"""Set by a test to free the threads `hang_blocking` left waiting."""


@tool(
    timeout_seconds=0.3,
    retry=RetrySettings(maximum_attempts=2, initial_interval_seconds=0.05, backoff_coefficient=1),
)
def hang_blocking(seconds: float) -> str:
    """A sync tool stuck in a blocking call, which no cancellation can interrupt; two tries."""
    executions["hang_blocking"] += 1
    release_blocked.wait(seconds)
    return "woke up"


applied: dict[str, str] = {}
"""Effects of `slow_effect` that are in place, by idempotency key."""
slow_effect_started = threading.Event()
slow_effect_finished = threading.Event()


def undo_slow_effect(undo: CompensationInput) -> str:
    """Tolerates an effect that never happened: its outcome may be unknown when undone."""
    label = applied.pop(undo.idempotency_key, None)
    return f"undid {label}" if label is not None else "nothing to undo"


@tool(side_effects=True, timeout_seconds=30, retry=FAST_RETRY, compensation=undo_slow_effect)
def slow_effect(label: str, seconds: float) -> dict[str, str]:
    """Side-effecting and slow: a sync tool (no cancellation interrupts it) that applies its
    effect at the end, after `seconds`."""
    call = current_call()
    slow_effect_started.set()
    time.sleep(seconds)
    applied[call.idempotency_key] = label
    slow_effect_finished.set()
    return {"label": label}


def undo_failing_effect(undo: CompensationInput) -> str:
    return "nothing to undo"


@tool(side_effects=True, retry=FAST_RETRY, compensation=undo_failing_effect)
def failing_effect(label: str) -> str:
    """Side-effecting, and fails on every attempt after it started: its outcome is unknown."""
    raise ConnectionError(f"lost the connection while applying {label}")


def undo_huge_effect(undo: CompensationInput) -> str:
    return "undone" if undo.result is None else "undone with its value"


@tool(side_effects=True, retry=FAST_RETRY, compensation=undo_huge_effect, max_result_chars=500)
def huge_effect(size: int) -> dict[str, str]:
    """Side-effecting, with a return value of `size` characters."""
    executions["huge_effect"] += 1
    return {"blob": "h" * size}


slow_undo_started = threading.Event()
slow_undos: list[str] = []


def slow_undo(undo: CompensationInput) -> str:
    """A compensation that takes a while: something to cancel in the middle of."""
    slow_undo_started.set()
    time.sleep(1.0)
    slow_undos.append(undo.idempotency_key)
    return "undone"


@tool(side_effects=True, retry=FAST_RETRY, compensation=slow_undo)
def effect_with_slow_undo(label: str) -> dict[str, str]:
    """Side-effecting; its compensation is slow."""
    return {"label": label}


@tool(retry=FAST_RETRY)
def find_user(email: str) -> str:
    """Finds a user id by email; fails with a message for the model when there is none."""
    executions[f"find_user:{email}"] += 1
    if email != "a@b.com":
        raise ToolError(f"No user has the email {email}")
    return "user_1"


@tool(retry=FAST_RETRY)
def parse_quantity(text: str) -> int:
    """Parses a quantity; a text that is not a number raises Python's own ValueError."""
    executions["parse_quantity"] += 1
    return int(text)


@tool(retry=FAST_RETRY)
def needs_a_list(items: str) -> int:
    """Raises Python's own TypeError (the arguments are valid, the tool misuses them)."""
    executions["needs_a_list"] += 1
    return len(items) + items  # type: ignore[operator]


@tool(retry=FAST_RETRY)
def long_complaint(size: int) -> str:
    """Raises a ValueError whose message is `size` characters long."""
    raise ValueError("HEAD" + "c" * size + "TAIL")


@tool(retry=FAST_RETRY, errors_to_model=(LookupError,))
def lookup_code(code: str) -> str:
    """Its KeyError's message goes to the model; its ValueError is retried and reduced."""
    executions[f"lookup_code:{code}"] += 1
    if code.startswith("k"):
        raise KeyError(f"no code {code}")
    raise ValueError(f"private detail {code}")


@tool(side_effects=True, retry=FAST_RETRY)
def refuse_write(label: str) -> str:
    """Side-effecting, without a compensation; refuses with a ToolError, changing nothing."""
    executions[f"refuse_write:{label}"] += 1
    raise ToolError(f"order {label} is not pending, so it cannot be changed")


charges: dict[str, str] = {}
"""Charges of `charge_card` that are in place, by idempotency key: the card gateway's ledger."""
refunded: list[str] = []
"""Idempotency keys of the charges refunded, in the order they were refunded."""


def refund_charge(undo: CompensationInput) -> str:
    """Tolerates a charge that never happened: its outcome may be unknown when undone."""
    if charges.pop(undo.idempotency_key, None) is None:
        return "nothing to refund"
    refunded.append(undo.idempotency_key)
    return "refunded"


@tool(side_effects=True, retry=FAST_RETRY, compensation=refund_charge)
def charge_card(label: str, decline: bool = False) -> dict[str, str]:
    """Side-effecting: charges the card, then fails to parse the gateway's reply (a
    JSONDecodeError, which is a ValueError). `decline` refuses with a ToolError before
    charging anything."""
    call = current_call()
    executions[f"charge_card:{label}"] += 1
    if decline:
        raise ToolError(f"the card for {label} was declined")
    charges[call.idempotency_key] = label
    return json.loads("<html>502 Bad Gateway</html>")


@tool(retry=FAST_RETRY, local=True)
def local_lookup(key: str, failures: int = 0) -> str:
    """A local tool: fails `failures` times per key, then answers (counts its executions)."""
    executions[f"local_lookup:{key}"] += 1
    if executions[f"local_lookup:{key}"] <= failures:
        raise ConnectionError(f"local_lookup {key} attempt {executions[f'local_lookup:{key}']}")
    if key.startswith("missing"):
        raise ToolError(f"no entry {key}")
    return f"{key}: found after {executions[f'local_lookup:{key}']} attempts"


holding: set[str] = set()
"""Keys whose `hold` call has started."""
released: set[str] = set()
"""Keys whose `hold` call may return."""


@tool(timeout_seconds=30, retry=RetrySettings(maximum_attempts=1))
async def hold(key: str) -> str:
    """Works until the test releases `key` (within its timeout): a turn that goes on for as
    long as the test needs it to."""
    holding.add(key)
    while key not in released:
        await asyncio.sleep(0.01)
    return f"released {key}"


tiny_undone: list[str] = []
"""Idempotency keys of the `tiny_effect` calls undone, in the order they were undone."""


def undo_tiny_effect(undo: CompensationInput) -> str:
    tiny_undone.append(undo.idempotency_key)
    return "undone"


@tool(side_effects=True, retry=FAST_RETRY, compensation=undo_tiny_effect)
def tiny_effect(n: int, padding: str = "") -> int:
    """Side-effecting and small (but for its `padding`): for runs with thousands of effects."""
    return n
