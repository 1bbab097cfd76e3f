"""Admission of model calls per provider: the limits a worker puts on them, and the hold that a
provider's `retry-after` puts on every later call of that provider on the worker.

A real provider's calls run on a task queue of their own, `<queue>-model-<provider>`
(workflows/model_gateway.py), which every worker polls with that provider's limits
(worker.build_worker). The limits come from the environment, and are checked at worker start:

    AGENT_MODEL_CONCURRENCY_OPENAI=8    at most 8 calls at once on this worker (the provider
                                        worker's max_concurrent_activities)
    AGENT_MODEL_RATE_OPENAI=5           at most 5 calls a second started from the queue, by all
                                        workers together (max_task_queue_activities_per_second,
                                        which the server enforces); also 300/min or 5/s
    AGENT_MODEL_CONCURRENCY_OPENAI_GPT_4O=2   the same two for one model, held on each worker
    AGENT_MODEL_RATE_OPENAI_GPT_4O=1          (the model upper-cased, anything but letters and
                                               digits as `_`: gpt-4o-mini is GPT_4O_MINI)

ANTHROPIC in place of OPENAI for Anthropic. What holds across the fleet and what holds per
worker: docs/admission.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..workflows.errors import AgentConfigurationError
from ..workflows.providers import ADMITTED_PROVIDERS
from .providers._http_errors import transient_error

# The providers whose calls have a queue of their own are the catalogue's (admitted); the
# variables spell openai-responses OPENAI_RESPONSES.

CONCURRENCY_VARIABLE = "AGENT_MODEL_CONCURRENCY"
RATE_VARIABLE = "AGENT_MODEL_RATE"


@dataclass(frozen=True)
class ModelLimits:
    """Limits on one model's calls, held by each worker on its own."""

    concurrency: int | None = None
    """Calls of this model at once on this worker."""
    rate_per_second: float | None = None
    """Calls of this model started a second on this worker, evenly spaced."""


@dataclass(frozen=True)
class ProviderLimits:
    """What a worker's provider queue admits."""

    concurrency: int | None = None
    """Calls at once on this worker: its provider worker's `max_concurrent_activities` (None:
    the SDK's default, 100)."""
    rate_per_second: float | None = None
    """Calls started from the provider's queue a second, by every worker together: the
    server-enforced `max_task_queue_activities_per_second` (None: no limit)."""
    models: Mapping[str, ModelLimits] = field(default_factory=dict)
    """By model name as the variables spell it (`model_key`)."""
    hold_on_retry_after: bool = True
    """A `retry-after` holds every later call of the provider on this worker until it has
    passed. Off only for the benchmark's "before" (bench/admission.py)."""

    def for_model(self, model: str) -> ModelLimits:
        return self.models.get(model_key(model), ModelLimits())


@dataclass(frozen=True)
class Admission:
    """Every provider's limits, as one worker applies them."""

    providers: Mapping[str, ProviderLimits] = field(default_factory=dict)

    def limits(self, provider: str) -> ProviderLimits:
        return self.providers.get(provider, ProviderLimits())

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Admission:
        """The limits the AGENT_MODEL_CONCURRENCY_* and AGENT_MODEL_RATE_* variables set.
        Raises AgentConfigurationError (one line, naming the variable) on a bad name or value."""
        environ = os.environ if environ is None else environ
        concurrency: dict[tuple[str, str], int] = {}
        rate: dict[tuple[str, str], float] = {}
        for name in sorted(environ):
            for prefix in (CONCURRENCY_VARIABLE, RATE_VARIABLE):
                if name == prefix:
                    raise AgentConfigurationError(
                        f"{name} needs a provider: {prefix}_OPENAI or {prefix}_ANTHROPIC "
                        f"(then _<MODEL> for one model)"
                    )
                if name.startswith(prefix + "_"):
                    key = _provider_and_model(name, name[len(prefix) + 1 :])
                    if prefix == CONCURRENCY_VARIABLE:
                        concurrency[key] = _concurrency(name, environ[name])
                    else:
                        rate[key] = _rate(name, environ[name])
        providers: dict[str, ProviderLimits] = {}
        for provider in sorted({provider for provider, _ in [*concurrency, *rate]}):
            models = sorted({m for p, m in [*concurrency, *rate] if p == provider and m})
            providers[provider] = ProviderLimits(
                concurrency=concurrency.get((provider, "")),
                rate_per_second=rate.get((provider, "")),
                models={
                    model: ModelLimits(
                        concurrency=concurrency.get((provider, model)),
                        rate_per_second=rate.get((provider, model)),
                    )
                    for model in models
                },
            )
        return cls(providers)

    def describe(self) -> list[str]:
        """One line per configured provider, for the worker's log."""
        lines = []
        for provider, limits in sorted(self.providers.items()):
            parts = []
            if limits.concurrency is not None:
                parts.append(f"at most {limits.concurrency} at once on this worker")
            if limits.rate_per_second is not None:
                parts.append(f"{limits.rate_per_second:g}/s across the fleet")
            for model, own in sorted(limits.models.items()):
                bounds = []
                if own.concurrency is not None:
                    bounds.append(f"{own.concurrency} at once")
                if own.rate_per_second is not None:
                    bounds.append(f"{own.rate_per_second:g}/s")
                parts.append(f"{model}: {' and '.join(bounds)} on this worker")
            lines.append(f"{provider} model calls: {'; '.join(parts)}")
        return lines


def model_key(model: str) -> str:
    """A model's name as the variables spell it: gpt-4o-mini is GPT_4O_MINI."""
    return re.sub(r"[^A-Z0-9]", "_", model.upper())


def _provider_and_model(name: str, rest: str) -> tuple[str, str]:
    # The longest spelling first: OPENAI_RESPONSES_GPT_5 is openai-responses', not openai's.
    for provider in sorted(ADMITTED_PROVIDERS, key=lambda p: -len(p)):
        spelled = model_key(provider)
        if rest == spelled:
            return provider, ""
        if rest.startswith(spelled + "_"):
            model = rest[len(spelled) + 1 :]
            if not model:
                break
            return provider, model
    *most, last = (model_key(p) for p in ADMITTED_PROVIDERS)
    known = f"{', '.join(most)} or {last}"
    raise AgentConfigurationError(
        f"{name} names no provider: after {name[: len(name) - len(rest)]} comes {known}, "
        f"then _<MODEL> for one model (scripted model calls take no limits)"
    )


def _concurrency(name: str, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number < 1:
        raise AgentConfigurationError(
            f"{name}={value!r}: must be a whole number of calls at once, at least 1"
        )
    return number


_RATE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?:/\s*(s|sec|min|m))?\s*")


def _rate(name: str, value: str) -> float:
    match = _RATE.fullmatch(value)
    number = float(match.group(1)) if match else math.nan
    if not (math.isfinite(number) and number > 0):
        raise AgentConfigurationError(
            f"{name}={value!r}: must be calls a second above 0, as 5, 5/s or 300/min"
        )
    assert match is not None
    return number / 60 if match.group(2) in ("min", "m") else number


# --- on the worker: the gate each model call goes through ------------------------------------


RECOVERY_SUCCESSES = 10
"""After a `retry-after` narrowed a gate's window to w calls at once, it widens by one after
RECOVERY_SUCCESSES x w calls in a row that the provider served."""


class Gate:
    """The calls of one provider from one task queue, on this worker process.

    A `retry-after` does two things here. It holds every later call until it has passed (the
    provider said when to come back). And the first one of a hold halves the calls this worker
    lets through at once (its window, otherwise only the configured concurrency): released all
    together after the hold, the calls that were waiting would make the next wave of 429s. The
    window widens again by one after RECOVERY_SUCCESSES times its width of calls served, up to
    the configured concurrency, where it stops counting.
    """

    def __init__(self, provider: str, limits: ProviderLimits) -> None:
        self.provider = provider
        self.limits = limits
        self.not_before = 0.0
        """time.monotonic() before which no call of the provider starts here."""
        self.holds = 0
        """`retry-after` answers that held the provider (for the log and the benchmark)."""
        self.in_flight = 0
        """Calls let through and not finished."""
        self.window: int | None = None
        """Calls let through at once since a `retry-after` narrowed it; None: no narrowing."""
        self._served_in_a_row = 0
        self._changed = asyncio.Event()
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._next_start: dict[str, float] = {}

    def hold(self, delay: timedelta) -> None:
        """No call of this provider starts here before `delay` from now has passed; the first
        `retry-after` of a hold halves the window."""
        if not self.limits.hold_on_retry_after:
            return
        now = time.monotonic()
        if now >= self.not_before:  # a new hold, not one more 429 of the same wave
            self.window = max(1, self.in_flight // 2)
            self._served_in_a_row = 0
        self.holds += 1
        self.not_before = max(self.not_before, now + delay.total_seconds())

    @contextlib.asynccontextmanager
    async def admit(self, model: str, *, latest_start: float | None = None) -> AsyncIterator[None]:
        """Wait for the model's own limits, the provider's hold and the window, then let one
        call through. A call the provider answers with a delay to wait (`next_retry_delay`,
        from its `retry-after`) holds the provider's later calls here as long. `latest_start`
        (time.monotonic()) is when this attempt runs out: a hold that lasts past it fails the
        attempt at once, to be retried when the hold is over, instead of timing it out."""
        own = self.limits.for_model(model)
        key = model_key(model)
        semaphore: contextlib.AbstractAsyncContextManager[object] = contextlib.nullcontext()
        if own.concurrency is not None:
            semaphore = self._semaphores.setdefault(key, asyncio.Semaphore(own.concurrency))
        async with semaphore:
            start_at = time.monotonic()
            if own.rate_per_second is not None:
                start_at = max(start_at, self._next_start.get(key, 0.0))
                self._next_start[key] = start_at + 1 / own.rate_per_second
            await self._wait_for_turn(start_at, latest_start)
            self.in_flight += 1
            try:
                yield
            except ApplicationError as error:
                if error.next_retry_delay is not None:
                    self.hold(error.next_retry_delay)
                    activity.logger.info(
                        "%s asked to wait %.2f s: its later calls on this worker wait too",
                        self.provider,
                        error.next_retry_delay.total_seconds(),
                    )
                raise
            else:
                self._served()
            finally:
                self.in_flight -= 1
                self._changed.set()

    def _served(self) -> None:
        if self.window is None:
            return
        self._served_in_a_row += 1
        if self._served_in_a_row >= RECOVERY_SUCCESSES * self.window:
            self._served_in_a_row = 0
            self.window += 1
            ceiling = self.limits.concurrency
            if ceiling is not None and self.window >= ceiling:
                self.window = None

    async def _wait_for_turn(self, start_at: float, latest_start: float | None) -> None:
        # The hold may be pushed back while this call waits: look at it again after each wait.
        while True:
            until = max(start_at, self.not_before)
            now = time.monotonic()
            if until > now:
                if latest_start is not None and until > latest_start:
                    raise transient_error(
                        f"{self.provider} calls are held on this worker for {until - now:.2f} s "
                        "(a retry-after, or this model's rate), longer than this attempt has left",
                        next_retry_delay=timedelta(seconds=until - now),
                    )
                await asyncio.sleep(until - now)
            elif self.window is not None and self.in_flight >= self.window:
                self._changed.clear()
                await self._changed.wait()
            else:
                return


class Gates:
    """The gates of the model calls a plugin's workers make, by task queue and provider: each
    AgentPlugin has its own (two plugins in one process share none)."""

    def __init__(self) -> None:
        self._gates: dict[tuple[str, str], Gate] = {}

    def install(self, task_queue: str, provider: str, limits: ProviderLimits) -> None:
        """Apply `limits` to the calls of `provider` from `task_queue` (when a worker is built;
        a gate already there keeps its hold when its limits are the same)."""
        key = (task_queue, provider)
        existing = self._gates.get(key)
        if existing is None or existing.limits != limits:
            self._gates[key] = Gate(provider, limits)

    def gate(self, task_queue: str, provider: str) -> Gate:
        """The gate of `provider`'s calls from `task_queue` (with no limits but the hold when
        no worker installed any: a run's own queue, for runs older than the provider queues)."""
        key = (task_queue, provider)
        found = self._gates.get(key)
        if found is None:
            found = self._gates[key] = Gate(provider, ProviderLimits())
        return found

    @contextlib.asynccontextmanager
    async def admitted(self, provider: str, model: str) -> AsyncIterator[None]:
        """In a model activity: wait until this provider and model may be called, then call."""
        info = activity.info()
        latest_start = None
        if info.start_to_close_timeout is not None:
            ends = info.started_time + info.start_to_close_timeout
            latest_start = time.monotonic() + (ends - datetime.now(UTC)).total_seconds()
        async with self.gate(info.task_queue, provider).admit(model, latest_start=latest_start):
            yield
