"""What a sizing's workload costs a month, and what one conversation costs turn by turn.

Pure arithmetic on bench.sizing's inputs (a name -> value dict), no I/O: the model calls from the
token curve at a model's prices, the workers and a self-hosted cluster at an instance price, and a
conversation's turns with and without compaction. bench/sizing.py says where each input comes
from and prints what this computes.

The token curve: a call sends `input_tokens_a_call` plus `input_tokens_a_step` for each step
before it (a turn of a conversation counts the steps of the turns before it too). Output is
`output_tokens_a_step` for a call that asks for tools and `output_tokens_an_answer` for the call
that answers.

The cache, by provider:

- **OpenAI** caches a prefix it has seen by itself. In a run, the measured share
  `1 - uncached_input_share` of the input is read from the cache (it counts the short first calls
  that OpenAI's 1,024-token minimum leaves uncached). Models before GPT-5.6 charge nothing to
  write it; GPT-5.6 and later bill the write at 1.25x input (`cache_write_tokens`), so a model
  with a cache-write price writes what it does not read: the uncached share, at most (a prompt
  under the minimum writes nothing).
- **Anthropic** caches up to the breakpoint the provider adapter puts on the last message: a
  call reads what the call before it sent (at the cached price, 0.1x input) and writes what is
  new (at the cache-write price, 1.25x input). So each token of a run is written once, by the
  call that first sends it, and read by every call after.
- **A conversation** is priced call by call on either provider: its prompts are thousands of
  tokens, well past OpenAI's minimum, so a call reads the whole of the call before's prompt when
  the cache is warm. Within a turn it is; between turns only `turn_cache_warm_share` of the
  time (a cache lapses after about 5 minutes idle). A call on a cold cache pays the input price
  for its whole prompt on OpenAI, and writes it on Anthropic.
- **Compaction** (AgentInput(compaction="summary")): before a call whose prompt would pass
  `compaction_threshold_tokens`, a summary call reads what is removed (the prompt down to
  `compaction_target_ratio` of the threshold, the summary before it included) on a cold cache
  and writes a `summary_tokens` summary. The prompt is then the target, with the summary in it, and
  the next call finds the cache cold: it rewrote the prompt from the point of the edit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

HOURS_A_MONTH = 730  # 8,760 hours a year / 12


@dataclass(frozen=True)
class Tokens:
    """Tokens by the price they are billed at."""

    uncached: float = 0.0
    """Input at the input price."""
    cached: float = 0.0
    """Input read from the prefix cache."""
    written: float = 0.0
    """Input written to the prefix cache (Anthropic; OpenAI from GPT-5.6)."""
    output: float = 0.0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.uncached + other.uncached,
            self.cached + other.cached,
            self.written + other.written,
            self.output + other.output,
        )

    def __mul__(self, factor: float) -> Tokens:
        return Tokens(
            self.uncached * factor, self.cached * factor, self.written * factor,
            self.output * factor,
        )  # fmt: skip

    @property
    def input(self) -> float:
        return self.uncached + self.cached + self.written


def usd(tokens: Tokens, v: dict[str, float]) -> dict[str, float]:
    """The dollars of each term at the model's prices (dollars a million tokens)."""
    terms = {
        "model_uncached_input_usd": tokens.uncached * v["model_input_usd_a_million_tokens"],
        "model_cached_input_usd": tokens.cached * v["model_cached_input_usd_a_million_tokens"],
        "model_cache_write_usd": tokens.written * v["model_cache_write_usd_a_million_tokens"],
        "model_output_usd": tokens.output * v["model_output_usd_a_million_tokens"],
    }
    terms = {name: value / 1e6 for name, value in terms.items()}
    terms["model_input_usd"] = (
        terms["model_uncached_input_usd"]
        + terms["model_cached_input_usd"]
        + terms["model_cache_write_usd"]
    )
    terms["model_usd"] = terms["model_input_usd"] + terms["model_output_usd"]
    return terms


def dollars(tokens: Tokens, v: dict[str, float]) -> float:
    return usd(tokens, v)["model_usd"]


def writes_cache(v: dict[str, float], anthropic: bool) -> bool:
    """Whether what a call sends past the cached prefix is billed as a cache write: on
    Anthropic, and on an OpenAI model with a cache-write price (GPT-5.6 and later)."""
    return anthropic or v["model_cache_write_usd_a_million_tokens"] > 0


def run_tokens(v: dict[str, float], steps: float, anthropic: bool) -> Tokens:
    """One run of `steps` steps: steps + 1 calls, the k-th (from 0) sending a + b x k."""
    a, b = v["input_tokens_a_call"], v["input_tokens_a_step"]
    sent = (steps + 1) * a + b * steps * (steps + 1) / 2
    output = steps * v["output_tokens_a_step"] + v["output_tokens_an_answer"]
    if anthropic:
        written = a + b * steps  # the last call's prompt: each token written once
        return Tokens(cached=sent - written, written=written, output=output)
    uncached = sent * v["uncached_input_share"]
    if writes_cache(v, anthropic):
        return Tokens(cached=sent - uncached, written=uncached, output=output)
    return Tokens(uncached=uncached, cached=sent - uncached, output=output)


def _call(prompt: float, read: float, writes: bool, output: float) -> Tokens:
    """One call that finds `read` tokens of its prompt in the cache, and writes the rest when
    `writes` (see `writes_cache`)."""
    read = min(read, prompt)
    rest = prompt - read
    if writes:
        return Tokens(cached=read, written=rest, output=output)
    return Tokens(uncached=rest, cached=read, output=output)


@dataclass(frozen=True)
class Turn:
    tokens: Tokens
    """Every call of the turn, summary calls included."""
    summary: Tokens
    """The summary calls alone."""
    compactions: int
    largest_prompt: float


def conversation(
    v: dict[str, float],
    turns: int,
    steps: int,
    anthropic: bool,
    threshold: float | None,
    warm_share: float | None = None,
) -> list[Turn]:
    """Each turn of one conversation: `steps` calls that ask for tools, then the answer.

    `threshold`: compact before a call whose prompt would pass it (None: never). The expected
    tokens of a turn's first call blend a warm cache (`warm_share` of turns) and a cold one.
    """
    a, b = v["input_tokens_a_call"], v["input_tokens_a_step"]
    writes = writes_cache(v, anthropic)
    warm = v["turn_cache_warm_share"] if warm_share is None else warm_share
    summary_size = v["summary_tokens"]
    prompt, previous = a, 0.0  # the next call's prompt; the prompt the cache holds
    result = []
    for _ in range(turns):
        tokens = summary = Tokens()
        compactions, largest = 0, 0.0
        for call in range(steps + 1):
            output = v["output_tokens_a_step"] if call < steps else v["output_tokens_an_answer"]
            if threshold is not None and prompt > threshold:
                target = threshold * v["compaction_target_ratio"]
                # The summary reads what the prompt loses (the new summary sits in the target),
                # on a cold cache: its prompt is new.
                removed = prompt - target + summary_size
                made = _call(removed, 0, writes, summary_size)
                summary, tokens = summary + made, tokens + made
                compactions += 1
                prompt, previous = target, 0.0
                hot = cold = _call(prompt, 0, writes, output)
            else:
                hot = _call(prompt, previous, writes, output)
                cold = _call(prompt, 0, writes, output)
            tokens += (hot * warm + cold * (1 - warm)) if call == 0 else hot
            largest = max(largest, prompt)
            previous = prompt
            if call < steps:
                prompt += b  # the reply and its tool result
        result.append(Turn(tokens, summary, compactions, largest))
    return result


def _cumulative(costs: list[float]) -> list[float]:
    total, out = 0.0, []
    for cost in costs:
        total += cost
        out.append(total)
    return out


def pays_from(with_: list[float], without: list[float]) -> int | None:
    """The first turn (from 1) from which the cumulative cost with compaction stays below the
    cost without, to the conversation's end; None if it never does."""
    first = None
    for turn, (w, n) in enumerate(zip(_cumulative(with_), _cumulative(without), strict=True), 1):
        below = w < n * (1 - 1e-9)  # not a rounding error's worth of difference
        first = (first or turn) if below else None
    return first


def latest_paying_compaction(
    v: dict[str, float], turns: int, steps: int, anthropic: bool, warm_share: float
) -> int | None:
    """The latest turn at which one compaction (the threshold set just under that turn's second
    call) still makes the whole conversation cheaper than none; None if none does."""
    a, b = v["input_tokens_a_call"], v["input_tokens_a_step"]
    none = sum(
        dollars(t.tokens, v) for t in conversation(v, turns, steps, anthropic, None, warm_share)
    )
    latest = None
    for turn in range(1, turns + 1):
        threshold = a + b * (steps * (turn - 1) + 1) - b / 2
        done = conversation(v, turns, steps, anthropic, threshold, warm_share)
        if sum(dollars(t.tokens, v) for t in done) < none:
            latest = turn
    return latest


def by_turn(
    v: dict[str, float], scenario: dict[str, float], anthropic: bool, conversations_a_month: float
) -> dict[str, Any]:
    """A conversation's model cost turn by turn, with and without compaction."""
    turns = round(scenario["messages_a_day"] * scenario["days_open"])
    steps = round(scenario["steps"])
    threshold = v["compaction_threshold_tokens"]
    sides = {}
    costs = {}
    for side, limit in (("without_compaction", None), ("with_compaction", threshold)):
        done = conversation(v, turns, steps, anthropic, limit)
        costs[side] = [dollars(t.tokens, v) for t in done]
        whole = sum(costs[side])
        first = next((i for i, t in enumerate(done, 1) if t.compactions), None)
        sides[side] = {
            "model_usd_turn_1": costs[side][0],
            "model_usd_turn_10": costs[side][min(10, turns) - 1],
            "model_usd_last_turn": costs[side][-1],
            "model_usd_a_conversation": whole,
            "model_usd_a_month": whole * conversations_a_month,
            "model_summary_usd_a_conversation": sum(dollars(t.summary, v) for t in done),
            "model_usd_by_turn": costs[side],
            "largest_prompt_tokens": max(t.largest_prompt for t in done),
            "compactions": sum(t.compactions for t in done),
            "first_compaction_turn": first,
        }
    pays = pays_from(costs["with_compaction"], costs["without_compaction"])
    a, b = v["input_tokens_a_call"], v["input_tokens_a_step"]
    latest = {
        name: latest_paying_compaction(v, turns, steps, anthropic, warm)
        for name, warm in (("cache_cold_between_turns", 0.0), ("cache_warm_between_turns", 1.0))
    }
    return {
        "turns": turns,
        "compaction_threshold_tokens": threshold,
        **sides,
        "compaction_pays_from_turn": pays,
        "compaction_pays_from_prompt_tokens": (
            None if pays is None else a + b * steps * pays
        ),  # the prompt without compaction at the end of that turn
        "latest_turn_a_compaction_pays": latest,
    }


def infrastructure(
    v: dict[str, float], processes: int, memory_gb: float, steps_peak: float, history_gb: float
) -> dict[str, float]:
    """Workers and a self-hosted cluster, on instances sized for the peak all month."""
    vcpu_month = v["vcpu_usd_an_hour"] * HOURS_A_MONTH
    worker_vcpus = max(processes, math.ceil(memory_gb / v["memory_gb_a_vcpu"]))
    cluster_vcpus = max(
        v["cluster_min_vcpus"],
        math.ceil(
            steps_peak * v["server_cpu_seconds_a_step"] * v["cluster_cpu_over_dev_server"]
            / v["cpu_utilisation_target"]
        ),
    )  # fmt: skip
    cluster_compute = cluster_vcpus * vcpu_month
    cluster_storage = history_gb * v["cluster_storage_usd_a_gb_month"]
    return {
        "worker_vcpus": worker_vcpus,
        "workers_usd_a_month": worker_vcpus * vcpu_month,
        "cluster_vcpus": cluster_vcpus,
        "cluster_compute_usd_a_month": cluster_compute,
        "cluster_storage_usd_a_month": cluster_storage,
        "self_hosted_usd_a_month": cluster_compute + cluster_storage,
    }
