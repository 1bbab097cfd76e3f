"""The bounds every number a run is given carries, so that no value its input's schema accepts
can crash workflow code, and the contract's JSON Schema says so to other languages.

A client in another language can send any JSON number: `1e300` seconds overflows `timedelta`
inside the workflow, a negative timeout or retry interval is refused by the server in the middle
of the run, and either used to leave the run stuck with a workflow task failing forever. So
every duration, interval, count, size, price and limit of a run's input is one of the types
below: positive where zero means nothing, and under a stated maximum. A value outside them is
refused where it enters (AgentClient, the HTTP API, pydantic's own check), or, sent by another
client, fails the run as it starts with AgentInputInvalid (workflows/payloads.py).

A leaf module: it imports nothing of the project. Pure.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

MAX_SECONDS = 366 * 86_400
"""Every duration and interval: a year (a leap one). Far past any wait a run is built for (a
day for a person, by default), and far under what `timedelta` and Temporal's timers hold."""
MAX_COUNT = 2**53 - 1
"""Counts and amounts a run records (tokens used, steps taken, dollars spent): the largest
integer every JSON reader keeps exact, JavaScript's among them."""
MAX_STEPS = 1_000_000
"""A run's (or a conversation turn's) step limit, and its continue-as-new interval."""
MAX_TOKENS = 10**12
"""A token limit (output, context, thinking, total over a run)."""
MAX_RESULT_CHARS = 1_000_000
"""A tool's result bound, in characters: a run's whole input, transcript included, travels in
1.8 MB (workflows/input_limits.py), so a larger result could never be carried on."""
MAX_ATTEMPTS = 10_000
"""A retry policy's attempts (0: Temporal's own "no limit")."""
MAX_BACKOFF = 100.0
"""A retry policy's backoff coefficient (Temporal needs at least 1)."""
MAX_USD = 1_000_000_000.0
"""A cost limit, and a price in dollars per million tokens."""
MAX_PAUSED_SECONDS = 100 * MAX_SECONDS
"""The time a run chain has waited for people, which its wall-clock limit leaves out: a century,
so that what is left of a year's limit still fits a timer."""

MAX_SCRIPT_SECONDS = 600.0
"""A code-mode script's execution time (workflows/inputs.py CodeMode): ten minutes of a worker's
CPU, far past what a script that calls tools and adds up their results needs."""
MAX_SCRIPT_MEMORY = 4 * 1024**3
"""A script's heap: 4 GiB, what one sandbox process may take of a worker's machine."""
MIN_SCRIPT_MEMORY = 1024**2
"""Below a MiB the sandbox cannot start a script."""
MAX_SCRIPT_CALLS = 1_000
"""A script's tool calls: every one is an activity in the run's history, and a run continues
as new only between steps, so one script adds at most this many."""

Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False)]
"""A duration or an interval: more than 0, at most MAX_SECONDS."""
Delay = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
"""A duration that may be 0."""
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
"""A count or a position given to a run: 0 to MAX_COUNT."""
Recorded = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
"""A number the run records of itself (steps, tokens, latencies), which a continued run is
given back: within MAX_COUNT either way. Not held to 0 or more: a record may be a difference
(the tokens a compaction freed, less a summary longer than what it replaced), and a bound the
run's own arithmetic could cross would fail the workflow code that makes the record."""
RecordedAmount = Annotated[float, Field(ge=-MAX_COUNT, le=MAX_COUNT, allow_inf_nan=False)]
"""A measured amount the run records (dollars spent), likewise: finite, within MAX_COUNT."""
Steps = Annotated[int, Field(ge=1, le=MAX_STEPS)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
"""A token limit: at least 1."""
ResultChars = Annotated[int, Field(gt=0, le=MAX_RESULT_CHARS)]
Attempts = Annotated[int, Field(ge=0, le=MAX_ATTEMPTS)]
Backoff = Annotated[float, Field(ge=1, le=MAX_BACKOFF, allow_inf_nan=False)]
Dollars = Annotated[float, Field(ge=0, le=MAX_USD, allow_inf_nan=False)]
"""A price (per million tokens) or a cost limit."""
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
"""A share or a confidence, 0 to 1."""
