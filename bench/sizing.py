"""Sizing: what a fleet needs for a workload, modelled from bench.capacity's per-step figures.

    python -m bench.sizing [--input CAPACITY_JSON] [--processes N] [--provider openai|anthropic]
                           [--model MODEL] [--set NAME=VALUE ...] [--json PATH]

Reads what `python -m bench.capacity` measured (`--input`, by default the committed
bench/sizing_input.json, which docs/sizing.md is generated from), and for each scenario (a
million 10-step runs a day, a million 100-step runs a day, 10,000 conversations open for a week)
prints what it needs: Temporal actions a second and their cost on Temporal Cloud, persistence
transactions and history shards for a self-hosted cluster, worker processes and memory, model
calls against the provider's rate limits, and the size of the stores. Each limit is checked,
and the one with the highest utilisation is the one that binds first.

Then what it costs a month (bench/spend.py): the model calls at `--model`'s prices (by default the
provider's model the rate limits are for), Temporal Cloud, or a self-hosted cluster, and the
workers; which cost is largest; and for the conversations, one conversation's model cost turn by
turn, with and without compaction, and where compaction pays for itself.

Every input is one of three kinds, and the output says which: *measured* (from the capacity
JSON, named by its field), *published* (a figure from a vendor's page, with its address) or
*assumed* (a choice of this model's, with the reason; change it with `--set NAME=VALUE`).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import spend
from durable_agent.activities.pricing import (
    OPENAI_CACHE_WRITES,
    PRICES_AS_OF,
    SHIPPED_PRICES,
    price_for,
)
from durable_agent.serving.command_line import Command, parse, refuse

REPO = Path(__file__).resolve().parent.parent
DEFAULT_INPUT = REPO / "bench" / "sizing_input.json"
SECONDS_A_DAY = 86_400
HOURS_A_MONTH = spend.HOURS_A_MONTH
DAYS_A_MONTH = 30.4


@dataclass(frozen=True)
class Figure:
    value: float
    kind: str
    """"measured", "published" or "assumed"."""
    source: str


def published(value: float, source: str) -> Figure:
    return Figure(value, "published", source)


def assumed(value: float, source: str) -> Figure:
    return Figure(value, "assumed", source)


CLOUD_PRICING = "https://docs.temporal.io/cloud/pricing (Pay-As-You-Go, Business plan and up)"
ACTION_TIERS = [  # (actions in the tier, dollars a million), each tier after the one before
    (5e6, 50.0),
    (5e6, 45.0),
    (10e6, 40.0),
    (30e6, 35.0),
    (50e6, 30.0),
    (100e6, 25.0),
    (math.inf, 25.0),  # over 200M: "contact Sales"; priced here at the last published tier
]

PUBLISHED: dict[str, Figure] = {
    "cloud_aps_limit": published(
        500, "https://docs.temporal.io/cloud/limits: 500 actions a second a namespace by default"
    ),
    "cloud_active_storage_per_gbh": published(0.042, CLOUD_PRICING),
    "cloud_retained_storage_per_gbh": published(0.00105, CLOUD_PRICING),
    "history_event_limit": published(
        51_200,
        "https://docs.temporal.io/self-hosted-guide/defaults: a run fails past 51,200 events",
    ),
    "history_bytes_limit": published(
        50 * 2**20, "https://docs.temporal.io/self-hosted-guide/defaults: 50 MB a history"
    ),
    "updates_a_run_limit": published(
        2_000, "https://docs.temporal.io/self-hosted-guide/defaults: 2,000 updates in a history"
    ),
    "max_cached_workflows": published(
        1_000, "temporalio.worker.Worker(max_cached_workflows=1000), the SDK's default"
    ),
    "openai_rpm": assumed(
        30_000,
        "gpt-4o-mini at usage tier 5; check https://platform.openai.com/docs/models/gpt-4o-mini",
    ),
    "openai_tpm": assumed(
        150_000_000,
        "gpt-4o-mini at usage tier 5; check https://platform.openai.com/docs/models/gpt-4o-mini",
    ),
    "anthropic_rpm": assumed(
        4_000, "Claude Sonnet at tier 4; check https://docs.anthropic.com/en/api/rate-limits"
    ),
    "anthropic_itpm": assumed(
        2_000_000,
        "Claude Sonnet at tier 4, uncached input only (cache reads do not count); check "
        "https://docs.anthropic.com/en/api/rate-limits",
    ),
}

DEFAULT_MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-6"}
"""The models the rate limits above are for: the providers' defaults (workflows/providers.py)."""

PRICE_PAGES = {
    "openai": "https://openai.com/api/pricing",
    "anthropic": "https://www.anthropic.com/pricing",
}
ANTHROPIC_CACHING = (
    "https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching: reads 0.1x input, "
    "5-minute writes 1.25x"
)


def provider_of(model_name: str) -> str:
    return "anthropic" if model_name.startswith("claude") else "openai"


def model_prices(model_name: str) -> dict[str, Figure]:
    """A model's list prices, dollars a million tokens, from activities/pricing.py."""
    price = price_for(model_name, SHIPPED_PRICES)
    if price is None:
        raise ValueError(f"no price for it (priced: {', '.join(SHIPPED_PRICES)})")
    provider = provider_of(model_name)
    listed = f"{model_name} as of {PRICES_AS_OF} (activities/pricing.py): {PRICE_PAGES[provider]}"
    write = (
        published(price.cache_write, f"{listed}; {ANTHROPIC_CACHING}")
        if provider == "anthropic"
        else published(price.cache_write, f"{listed}; {OPENAI_CACHE_WRITES}")
    )
    return {
        "model_input_usd_a_million_tokens": published(price.input, listed),
        "model_cached_input_usd_a_million_tokens": published(price.cached_input, listed),
        "model_cache_write_usd_a_million_tokens": write,
        "model_output_usd_a_million_tokens": published(price.output, listed),
    }


AWS_ON_DEMAND = "https://aws.amazon.com/ec2/pricing/on-demand/"

ASSUMED: dict[str, Figure] = {
    "peak_to_average": assumed(3, "traffic follows the working day: the peak hour at 3x the mean"),
    "model_latency_seconds": assumed(
        2.0, "a real model's tool-calling reply (the bench's scripted model takes 0.2 s)"
    ),
    "tool_latency_seconds": assumed(0.2, "the demo's tools take 28-200 ms (README)"),
    "input_tokens_a_call": assumed(
        409.5,
        "fitted to docs/performance.md's tokens rows (K=10: 12,716 over 11 calls; K=40: 139,245 "
        "over 41): a call's input is this plus input_tokens_a_step for each step before it",
    ),
    "input_tokens_a_step": assumed(149.3, "fitted with input_tokens_a_call"),
    "uncached_input_share": assumed(
        0.37, "docs/performance.md: 63% of a 10-step run's input is cacheable"
    ),
    "output_tokens_a_step": assumed(
        50,
        "not measured (bench/tokens.py counts input): a reply that asks for a tool is a sentence "
        "and the call; the scripted model's are about 40 of the 149 tokens a step adds",
    ),
    "output_tokens_an_answer": assumed(200, "the reply that ends a run or a turn: a paragraph"),
    "turn_cache_warm_share": assumed(
        0,
        "turns whose first call finds the prefix cache warm: 10 messages a day come hours apart, "
        "and a cache lapses after 5 minutes idle (Anthropic; 5-10 on OpenAI)",
    ),
    "compaction_threshold_tokens": assumed(
        16_000,
        "compaction is off by default (AgentInput.compaction 'none', Limits.max_context_tokens "
        "None); turned on to save, a limit about half a week-old conversation's prompt",
    ),
    "compaction_target_ratio": assumed(0.6, "AgentInput.compaction_target_ratio's default"),
    "summary_tokens": assumed(
        500, "the summary a compaction writes, short plain text (compaction.SUMMARY_SYSTEM)"
    ),
    "cpu_utilisation_target": assumed(0.7, "worker cores kept 30% free for bursts and replays"),
    "vcpu_usd_an_hour": assumed(
        0.048,
        f"AWS m6i.xlarge on demand in us-east-1: $0.192 an hour for 4 vCPUs, 16 GiB "
        f"({AWS_ON_DEMAND}); sized for the peak all month, no discounts",
    ),
    "memory_gb_a_vcpu": assumed(4, "the same instance: 16 GiB for 4 vCPUs"),
    "cluster_cpu_over_dev_server": assumed(
        3,
        "a cluster's CPU a step over the dev server's: its services talk by RPC and its database "
        "replicates; not measured",
    ),
    "cluster_min_vcpus": assumed(
        24, "three 4-vCPU hosts for Temporal's services and three for its database, for redundancy"
    ),
    "cluster_storage_usd_a_gb_month": assumed(
        0.24, "EBS gp3 at $0.08 a GB-month (https://aws.amazon.com/ebs/pricing/), three copies"
    ),
    "shard_transaction_seconds": assumed(
        0.005,
        "one persistence transaction on a well-provisioned database; a shard runs one at a time "
        "(https://docs.temporal.io/temporal-service/temporal-server#history-shard)",
    ),
    "shard_utilisation_target": assumed(0.5, "a shard kept half idle, so a burst does not queue"),
    "history_shards": assumed(
        512, "a common production choice; fixed when the cluster is created, so sized for the peak"
    ),
    "namespace_retention_days": assumed(7, "closed runs' histories kept a week"),
    "store_retention_days": assumed(7, "AGENT_STORE_RETENTION's default (docs/fleet.md)"),
    "store_overhead": assumed(
        2.0, "PostgreSQL row headers and primary-key indexes on rows of about 1 KB"
    ),
}

SCENARIOS: dict[str, dict[str, float]] = {
    "1M runs a day, 10 steps": {"runs_a_day": 1e6, "steps": 10},
    "1M runs a day, 100 steps": {"runs_a_day": 1e6, "steps": 100},
    "10k conversations open for a week": {
        "conversations": 10_000,
        "days_open": 7,
        "messages_a_day": 10,  # assumed: a support conversation's pace
        "steps": 3,  # assumed: tool-calling steps a turn
    },
}


def measured(capacity: dict[str, Any], processes: int | None) -> dict[str, Figure]:
    """The per-step figures of one host row of a capacity JSON."""
    rows = capacity["processes"]
    row = (
        rows[0]
        if processes is None
        else next((r for r in rows if r["worker_processes"] == processes), None)
    )
    if row is None:
        counts = ", ".join(str(r["worker_processes"]) for r in rows)
        raise ValueError(f"the input measured {counts} worker processes, not {processes}")
    where = f"{row['worker_processes']} process(es)"
    s, probe = row["summary"], row["probe"]
    best = [level for level in row["levels"] if not level["queued"]] or row["levels"][:1]
    spent = best[-1]["run"]["seconds"]
    steps = capacity["steps"]
    figures = {
        f"{name}_a_step": Figure(probe["per_step"][name], "measured", "probe.per_step")
        for name in probe["per_step"]
    } | {
        f"{name}_a_run": Figure(
            probe["fixed"][name], "measured", "probe.fixed: a run besides its steps"
        )
        for name in probe["fixed"]
    }
    figures |= {
        "worker_cpu_seconds_a_step": Figure(
            s["worker_cpu_seconds_per_step"], "measured", f"summary ({where})"
        ),
        "server_cpu_seconds_a_step": Figure(
            s["server_cpu_seconds_per_step"],
            "measured",
            f"summary ({where}): the dev server, every service and SQLite in one process",
        ),
        "memory_bytes_a_cached_run": Figure(
            s["memory_bytes_per_cached_run"], "measured", f"summary ({where})"
        ),
        "worker_rss_idle_bytes": Figure(
            row["worker_rss_idle_bytes"], "measured", f"worker_rss_idle_bytes ({where})"
        ),
        "store_bytes_a_step": Figure(
            row["message_store_bytes_per_run"] / steps,
            "measured",
            f"message_store_bytes_per_run / {steps} steps",
        ),
        "overhead_seconds_a_step": Figure(
            (spent["wall"] - spent["model_running"] - spent["tools_running"]) / steps,
            "measured",
            "the last sustained level's run, less its model and tool time, a step",
        ),
        "sustainable_runs_a_second_a_host": Figure(
            s["sustainable_runs_per_second"], "measured", f"summary ({where})"
        ),
    }
    return figures


def action_cost(actions_a_month: float) -> float:
    """Dollars a month for this many actions, tier by tier."""
    cost, left = 0.0, actions_a_month
    for size, price in ACTION_TIERS:
        taken = min(left, size)
        cost += taken / 1e6 * price
        left -= taken
        if left <= 0:
            break
    return cost


def power_of_two_at_least(value: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(value, 1))))


def model(
    inputs: dict[str, Figure],
    scenario: dict[str, float],
    provider: str,
    model_name: str | None = None,
) -> dict[str, Any]:
    """What the scenario needs, each limit's utilisation (the first in `limits` binds), and
    what it costs a month with the model calls priced as `model_name`'s (the inputs' prices)."""
    v = {name: figure.value for name, figure in inputs.items()}
    steps = scenario["steps"]
    conversation = "conversations" in scenario
    if conversation:
        # A turn is a message (an update) and its steps; waiting for the next one is a timer (the
        # idle timeout). A conversation is one run, open the whole time.
        turns_a_day = scenario["conversations"] * scenario["messages_a_day"]
        units_a_second = turns_a_day / SECONDS_A_DAY
        actions_a_unit = 2 + v["actions_a_run"] - 1 + v["actions_a_step"] * steps
        turns_a_run = scenario["messages_a_day"] * scenario["days_open"]
        open_runs = scenario["conversations"]
        runs_a_day = scenario["conversations"] / scenario["days_open"]
        unit = "turn"
    else:
        units_a_second = scenario["runs_a_day"] / SECONDS_A_DAY
        actions_a_unit = v["actions_a_run"] + v["actions_a_step"] * steps
        turns_a_run = 1
        runs_a_day = scenario["runs_a_day"]
        unit = "run"
    peak = units_a_second * v["peak_to_average"]
    steps_peak = peak * steps
    model_calls_a_unit = steps + 1

    def per_run(name: str) -> float:
        return turns_a_run * (v[f"{name}_a_run"] + v[f"{name}_a_step"] * steps)

    events_a_run, bytes_a_run = per_run("events"), per_run("bytes")
    transactions_a_unit = v["transactions_a_run"] + v["transactions_a_step"] * steps
    duration = model_calls_a_unit * v["model_latency_seconds"] + steps * (
        v["tool_latency_seconds"] + v["overhead_seconds_a_step"]
    )
    if not conversation:
        open_runs = peak * duration  # Little's law: arrivals x time in the system

    # Temporal Cloud.
    actions_peak = peak * actions_a_unit
    actions_a_month = units_a_second * SECONDS_A_DAY * DAYS_A_MONTH * actions_a_unit
    retained_gb = runs_a_day * v["namespace_retention_days"] * bytes_a_run / 1e9
    active_gb = open_runs * bytes_a_run / 1e9 / (2 if conversation else 1)
    actions_dollars = action_cost(actions_a_month)
    storage_dollars = HOURS_A_MONTH * (
        active_gb * v["cloud_active_storage_per_gbh"]
        + retained_gb * v["cloud_retained_storage_per_gbh"]
    )
    # The Business plan: the greater of $500 a month and 10% of the usage (CLOUD_PRICING).
    plan_dollars = max(500.0, 0.1 * (actions_dollars + storage_dollars))
    cloud = {
        "actions_a_unit": actions_a_unit,
        "actions_a_second_average": units_a_second * actions_a_unit,
        "actions_a_second_peak": actions_peak,
        "actions_a_month": actions_a_month,
        "actions_dollars_a_month": actions_dollars,
        "active_storage_gb": active_gb,
        "retained_storage_gb": retained_gb,
        "storage_dollars_a_month": storage_dollars,
        "plan_dollars_a_month": plan_dollars,
        "dollars_a_month": actions_dollars + storage_dollars + plan_dollars,
    }
    # A self-hosted cluster.
    transactions_peak = peak * transactions_a_unit
    shard_capacity = v["shard_utilisation_target"] / v["shard_transaction_seconds"]
    self_hosted = {
        "transactions_a_second_peak": transactions_peak,
        "history_events_a_second_peak": peak * (events_a_run / turns_a_run),
        "history_bytes_a_second_peak": peak * (bytes_a_run / turns_a_run),
        "transactions_a_shard_a_second": shard_capacity,
        "shards_needed": power_of_two_at_least(transactions_peak / shard_capacity),
        "history_events_a_run": events_a_run,
        "history_bytes_a_run": bytes_a_run,
        "history_gb_kept": retained_gb + active_gb,
    }
    # Workers.
    cores = steps_peak * v["worker_cpu_seconds_a_step"] / v["cpu_utilisation_target"]
    cpu_processes = max(1, math.ceil(cores))  # one core a process: the GIL
    cache_processes = math.ceil(open_runs / v["max_cached_workflows"])
    processes = max(cpu_processes, cache_processes)
    workers = {
        "worker_cores": cores,
        "processes_for_cpu": cpu_processes,
        "processes_to_cache_every_open_run": cache_processes,
        "processes": processes,
        "sticky_hit_rate_with_cpu_processes": min(
            1.0, cpu_processes * v["max_cached_workflows"] / max(open_runs, 1)
        ),
        "open_runs": open_runs,
        "memory_gb": (
            processes * v["worker_rss_idle_bytes"] + open_runs * v["memory_bytes_a_cached_run"]
        )
        / 1e9,
    }
    # Model calls.
    calls_peak = peak * model_calls_a_unit
    # A call's input grows with the transcript before it; a turn of a conversation starts from
    # the turns before it, so its first call carries them.
    history_steps = (turns_a_run - 1) / 2 * steps if conversation else 0
    tokens_a_call = v["input_tokens_a_call"] + v["input_tokens_a_step"] * (
        history_steps + steps / 2
    )
    rpm = calls_peak * 60
    tpm = rpm * tokens_a_call
    calls = {
        "calls_a_second_peak": calls_peak,
        "concurrent_calls_peak": calls_peak * v["model_latency_seconds"],
        "requests_a_minute_peak": rpm,
        "input_tokens_a_call": tokens_a_call,
        "input_tokens_a_minute_peak": tpm,
        "uncached_input_tokens_a_minute_peak": tpm * v["uncached_input_share"],
    }
    # The message store keeps what a step adds, for the retention period after its last use.
    store_gb = (
        runs_a_day * turns_a_run * steps * v["store_bytes_a_step"]
        * v["store_retention_days"] * v["store_overhead"] / 1e9
    )  # fmt: skip
    shards_capacity = v["history_shards"] * shard_capacity
    limits: list[tuple[str, float, str | None]] = [
        ("Temporal Cloud actions a second (namespace default)", actions_peak, "cloud_aps_limit"),
        ("self-hosted: transactions a second on the history shards", transactions_peak, None),
        ("history events of one run", events_a_run, "history_event_limit"),
        ("history bytes of one run", bytes_a_run, "history_bytes_limit"),
    ]
    if conversation:
        limits.append(("updates in one run's history", turns_a_run, "updates_a_run_limit"))
    if provider == "openai":
        limits += [
            ("OpenAI requests a minute", rpm, "openai_rpm"),
            ("OpenAI tokens a minute", tpm, "openai_tpm"),
        ]
    else:
        limits += [
            ("Anthropic requests a minute", rpm, "anthropic_rpm"),
            ("Anthropic uncached input tokens a minute", tpm * v["uncached_input_share"],
             "anthropic_itpm"),
        ]  # fmt: skip
    checked = []
    for name, demand, key in limits:
        limit = v[key] if key else shards_capacity
        source = inputs[key].source if key else (
            f"{v['history_shards']:.0f} shards x {shard_capacity:.0f} transactions a second "
            "(history_shards, shard_transaction_seconds, shard_utilisation_target)"
        )  # fmt: skip
        checked.append(
            {"limit": name, "demand": demand, "capacity": limit, "utilisation": demand / limit,
             "source": source}
        )  # fmt: skip
    checked.sort(key=lambda row: row["utilisation"], reverse=True)
    costs = spending(
        v, scenario, provider, model_name or DEFAULT_MODELS[provider], cloud, workers, steps_peak
    )
    return {
        "scenario": scenario,
        "unit": unit,
        "units_a_second_average": units_a_second,
        "units_a_second_peak": peak,
        "steps_a_second_peak": steps_peak,
        "run_seconds": duration,
        "temporal_cloud": cloud,
        "self_hosted": self_hosted,
        "workers": workers,
        "model_calls": calls,
        "store_gb": store_gb,
        "limits": checked,
        "binds_first": checked[0]["limit"],
        **costs,
    }


def cache_model(anthropic: bool, conversation: bool, writes: bool = False) -> str:
    if conversation:
        return (
            "priced call by call; a warm cache serves the prompt of the call before, and a turn's "
            "first call finds it warm turn_cache_warm_share of the time"
        )
    if anthropic:
        return (
            "each token is written once, by the first call that sends it, and read by every call "
            "after"
        )
    if writes:  # an OpenAI model that bills its cache writes (GPT-5.6 and later)
        return (
            "1 - uncached_input_share of the input is read from it, at the cached price, and the "
            "rest written to it, at the cache-write price"
        )
    return "1 - uncached_input_share of the input is read from it, at the cached price"


def spending(
    v: dict[str, float],
    scenario: dict[str, float],
    provider: str,
    model_name: str,
    cloud: dict[str, float],
    workers: dict[str, Any],
    steps_peak: float,
) -> dict[str, Any]:
    """A month of the scenario in dollars, on Temporal Cloud and self-hosted; for conversations,
    one conversation's model cost turn by turn too."""
    anthropic = provider == "anthropic"
    steps = round(scenario["steps"])
    if "conversations" in scenario:
        # Steady state: as many start in a month as a month's share of those open end.
        conversations_a_month = scenario["conversations"] / scenario["days_open"] * DAYS_A_MONTH
        turns = round(scenario["messages_a_day"] * scenario["days_open"])
        one = spend.conversation(v, turns, steps, anthropic, threshold=None)
        month = sum((turn.tokens for turn in one), spend.Tokens()) * conversations_a_month
        by_turn = {
            "model_cost_by_turn": spend.by_turn(v, scenario, anthropic, conversations_a_month)
        }
    else:
        month = spend.run_tokens(v, steps, anthropic) * (scenario["runs_a_day"] * DAYS_A_MONTH)
        by_turn = {}
    priced = {f"{name}_a_month": value for name, value in spend.usd(month, v).items()}
    history_gb = cloud["active_storage_gb"] + cloud["retained_storage_gb"]
    infra = spend.infrastructure(
        v, workers["processes"], workers["memory_gb"], steps_peak, history_gb
    )
    model_usd = priced["model_usd_a_month"]
    cloud_path = {
        "model calls": model_usd,
        "Temporal Cloud": cloud["dollars_a_month"],
        "workers": infra["workers_usd_a_month"],
    }
    self_hosted_path = cloud_path.copy()
    del self_hosted_path["Temporal Cloud"]
    self_hosted_path["self-hosted cluster"] = infra["self_hosted_usd_a_month"]
    total_cloud, total_self_hosted = sum(cloud_path.values()), sum(self_hosted_path.values())
    largest_cloud = max(cloud_path, key=lambda name: cloud_path[name])
    largest_self_hosted = max(self_hosted_path, key=lambda name: self_hosted_path[name])
    return {
        "spend": {
            "model": model_name,
            "model_cache": cache_model(
                anthropic, "conversations" in scenario, spend.writes_cache(v, anthropic)
            ),
            "model_input_tokens_a_month": month.input,
            "model_output_tokens_a_month": month.output,
            **priced,
            "model_input_usd_a_month_without_cache": (
                month.input * v["model_input_usd_a_million_tokens"] / 1e6
            ),
            "temporal_cloud_usd_a_month": cloud["dollars_a_month"],
            **infra,
            "total_usd_a_month_cloud": total_cloud,
            "total_usd_a_month_self_hosted": total_self_hosted,
            "largest_cost_cloud": largest_cloud,
            "largest_cost_share_cloud": cloud_path[largest_cloud] / total_cloud,
            "largest_cost_self_hosted": largest_self_hosted,
            "largest_cost_share_self_hosted": (
                self_hosted_path[largest_self_hosted] / total_self_hosted
            ),
        },
        **by_turn,
    }


def _number(value: float) -> str:
    if value == int(value) and abs(value) < 100:
        return f"{value:.0f}"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:,.1f}"
    return f"{value:.3g}"


def _gb(value: float) -> str:
    return f"{value:,.1f} GB" if value >= 1 else f"{1000 * value:,.0f} MB"


def render(inputs: dict[str, Figure], results: dict[str, dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "### Inputs",
        "",
        "| input | value | kind | source |",
        "|---|---:|---|---|",
    ]
    for name, figure in inputs.items():
        lines.append(f"| {name} | {_number(figure.value)} | {figure.kind} | {figure.source} |")
    for title, r in results.items():
        c, h, w, m = r["temporal_cloud"], r["self_hosted"], r["workers"], r["model_calls"]
        unit = r["unit"]
        lines += [
            "",
            f"### {title}",
            "",
            "Scenario: "
            + ", ".join(
                f"{name.replace('_', ' ')} {_number(value)}"
                for name, value in r["scenario"].items()
            )
            + ".",
            "",
            f"{_number(r['units_a_second_average'])} {unit}s a second on average, "
            f"{_number(r['units_a_second_peak'])} at the peak ({_number(r['steps_a_second_peak'])}"
            f" steps a second); a {unit} takes {_number(r['run_seconds'])} s. "
            f"**Binds first: {r['binds_first']}.**",
            "",
            "| need | figure |",
            "|---|---:|",
            f"| Temporal actions a {unit} | {_number(c['actions_a_unit'])} |",
            f"| actions a second, average / peak | {_number(c['actions_a_second_average'])} / "
            f"{_number(c['actions_a_second_peak'])} |",
            f"| actions a month, and their cost on Temporal Cloud | "
            f"{c['actions_a_month'] / 1e6:,.0f}M, ${c['actions_dollars_a_month']:,.0f} |",
            f"| Temporal Cloud storage: active / retained, and its cost a month | "
            f"{_gb(c['active_storage_gb'])} / {_gb(c['retained_storage_gb'])}, "
            f"${c['storage_dollars_a_month']:,.0f} |",
            "| Temporal Cloud a month: actions, storage and the Business plan (10%, at least "
            f"$500) | ${c['dollars_a_month']:,.0f} |",
            f"| self-hosted: persistence transactions a second at the peak | "
            f"{_number(h['transactions_a_second_peak'])} |",
            f"| self-hosted: history shards needed (at "
            f"{_number(h['transactions_a_shard_a_second'])} transactions a second each) "
            f"| {h['shards_needed']:,} |",
            f"| history events and bytes a second at the peak | "
            f"{_number(h['history_events_a_second_peak'])} events, "
            f"{h['history_bytes_a_second_peak'] / 1e6:,.2f} MB |",
            f"| one run's history | {_number(h['history_events_a_run'])} events, "
            f"{h['history_bytes_a_run'] / 1e3:,.0f} KB |",
            f"| runs open at once (all in the workers' caches for a sticky hit) | "
            f"{_number(w['open_runs'])} |",
            f"| worker cores at the peak | {_number(w['worker_cores'])} |",
            f"| worker processes: for CPU / to cache every open run | {w['processes_for_cpu']:,} / "
            f"{w['processes_to_cache_every_open_run']:,} |",
            f"| sticky hit rate with the CPU's processes alone | "
            f"{w['sticky_hit_rate_with_cpu_processes']:.0%} |",
            f"| worker memory, {w['processes']:,} processes | {_gb(w['memory_gb'])} |",
            f"| model calls a second at the peak, and in flight "
            f"| {_number(m['calls_a_second_peak'])}, {_number(m['concurrent_calls_peak'])} |",
            f"| model requests a minute at the peak | {_number(m['requests_a_minute_peak'])} |",
            f"| input tokens a call, and a minute at the peak "
            f"| {_number(m['input_tokens_a_call'])}, "
            f"{m['input_tokens_a_minute_peak'] / 1e6:,.1f}M |",
            f"| message store (PostgreSQL), at its retention | {_gb(r['store_gb'])} |",
            "",
            "| limit | demand | capacity | utilisation | source |",
            "|---|---:|---:|---:|---|",
        ]
        for row in r["limits"]:
            lines.append(
                f"| {row['limit']} | {_number(row['demand'])} | {_number(row['capacity'])} "
                f"| {row['utilisation']:.0%} | {row['source']} |"
            )
        lines += render_spend(r)
        if "model_cost_by_turn" in r:
            lines += render_by_turn(r, title)
    return "\n".join(lines)


def _usd(value: float) -> str:
    if value >= 100:
        return f"${value:,.0f}"
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.3g}"


def _share(value: float) -> str:
    return "over 99%" if value > 0.99 else f"{value:.0%}"


def _billions(tokens: float) -> str:
    return f"{_number(tokens / 1e9)} billion"


def render_spend(r: dict[str, Any]) -> list[str]:
    s = r["spend"]
    without = _usd(s["model_input_usd_a_month_without_cache"])
    cloud, hosted = s["largest_cost_share_cloud"], s["largest_cost_share_self_hosted"]
    if s["largest_cost_cloud"] == s["largest_cost_self_hosted"]:
        largest = (
            f"**Largest cost: {s['largest_cost_cloud']}, {_share(cloud)} of the total on Temporal "
            f"Cloud and {_share(hosted)} self-hosted.**"
        )
    else:
        largest = (
            f"**Largest cost: {s['largest_cost_cloud']} on Temporal Cloud ({_share(cloud)} of the "
            f"total); {s['largest_cost_self_hosted']} self-hosted ({_share(hosted)}).**"
        )
    return [
        "",
        f"What it costs a month, the model calls at {s['model']}'s prices. The prefix cache: "
        f"{s['model_cache']}.",
        "",
        "| cost a month | dollars |",
        "|---|---:|",
        f"| model input: uncached / cached reads / cache writes "
        f"| {_usd(s['model_uncached_input_usd_a_month'])} / "
        f"{_usd(s['model_cached_input_usd_a_month'])} / "
        f"{_usd(s['model_cache_write_usd_a_month'])} |",
        f"| model input, {_billions(s['model_input_tokens_a_month'])} tokens (without a cache: "
        f"{without}) | {_usd(s['model_input_usd_a_month'])} |",
        f"| model output, {_billions(s['model_output_tokens_a_month'])} tokens "
        f"| {_usd(s['model_output_usd_a_month'])} |",
        f"| **model calls** | **{_usd(s['model_usd_a_month'])}** |",
        f"| Temporal Cloud (above) | {_usd(s['temporal_cloud_usd_a_month'])} |",
        f"| or a self-hosted cluster: {s['cluster_vcpus']:,} vCPUs and the histories' storage "
        f"(assumed) | {_usd(s['self_hosted_usd_a_month'])} |",
        f"| workers: {s['worker_vcpus']:,} vCPUs | {_usd(s['workers_usd_a_month'])} |",
        f"| **in all, on Temporal Cloud / self-hosted** | **{_usd(s['total_usd_a_month_cloud'])}"
        f" / {_usd(s['total_usd_a_month_self_hosted'])}** |",
        "",
        largest,
    ]


def render_by_turn(r: dict[str, Any], title: str) -> list[str]:
    t, s = r["model_cost_by_turn"], r["spend"]
    turns = t["turns"]
    conversations = t["without_compaction"]["model_usd_a_month"] / max(
        t["without_compaction"]["model_usd_a_conversation"], 1e-12
    )
    lines = [
        "",
        f"### {title}: one conversation by turn",
        "",
        f"{turns} turns of {r['scenario']['steps']:.0f} steps and the answer; "
        f"{_number(conversations)} conversations a month. With compaction: a summary before a "
        f"call that would send more than {_number(t['compaction_threshold_tokens'])} tokens "
        "(bench/spend.py says how it is counted).",
        "",
        f"| model cost ({s['model']}) | turn 1 | turn 10 | turn {turns} | a conversation "
        "| a month |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for side, name in (("without_compaction", "without compaction"),
                       ("with_compaction", "with compaction")):  # fmt: skip
        d = t[side]
        detail = f"prompts up to {_number(d['largest_prompt_tokens'])} tokens"
        if d["compactions"]:
            detail += (
                f"; {d['compactions']} compactions from turn {d['first_compaction_turn']}, "
                f"their summaries {_usd(d['model_summary_usd_a_conversation'])}"
            )
        lines.append(
            f"| {name} ({detail}) | {_usd(d['model_usd_turn_1'])} "
            f"| {_usd(d['model_usd_turn_10'])} | {_usd(d['model_usd_last_turn'])} "
            f"| {_usd(d['model_usd_a_conversation'])} | {_usd(d['model_usd_a_month'])} |"
        )
    pays, latest = t["compaction_pays_from_turn"], t["latest_turn_a_compaction_pays"]
    lines.append("")
    if pays is None:
        lines.append("**Compaction does not pay for itself within the conversation.**")
    else:
        lines.append(
            f"**Compaction pays for itself from turn {pays}** (a prompt of "
            f"{_number(t['compaction_pays_from_prompt_tokens'])} tokens without it): from then "
            "on the conversation has cost less with it than without."
        )

    def latest_at(turn: int | None) -> str:
        return "no turn" if turn is None else f"turn {turn}"

    lines += [
        "",
        "A late compaction costs more than none once the cache is warm (seed 000). The week's "
        "only compaction still pays if it comes at "
        f"{latest_at(latest['cache_cold_between_turns'])} at the latest with the cache cold "
        f"between turns, at {latest_at(latest['cache_warm_between_turns'])} with "
        "it warm; any later, it costs more than none.",
    ]
    return lines


def inputs_from(
    capacity: dict[str, Any], processes: int | None, model_name: str = DEFAULT_MODELS["openai"]
) -> dict[str, Figure]:
    return measured(capacity, processes) | PUBLISHED | model_prices(model_name) | ASSUMED


@click.command(cls=Command, help=(__doc__ or "").split("\n")[0])
@click.option(
    "--input", type=click.Path(path_type=Path), default=DEFAULT_INPUT, help="a capacity JSON"
)
@click.option("--processes", type=int, help="the host row to use (default: the first)")
@click.option("--provider", type=click.Choice(("openai", "anthropic")), default="openai")
@click.option(
    "--model",
    help="whose prices the model calls are at: a model of activities/pricing.py's table, of "
    "--provider (default: gpt-4o-mini on openai, claude-sonnet-4-6 on anthropic, the models "
    "the rate limits are for)",
)
@click.option("--set", multiple=True, metavar="NAME=VALUE", help="change an input")
@click.option("--json", type=click.Path(path_type=Path), help="also write the model here")
def command_line(**options: Any) -> SimpleNamespace:
    """The options, and what they choose: the model's name, the capacity read, the inputs."""
    args = SimpleNamespace(**options)
    args.model_name = model_name = args.model or DEFAULT_MODELS[args.provider]
    if price_for(model_name, SHIPPED_PRICES) is None:
        refuse(f"--model {model_name}: no price for it (priced: {', '.join(SHIPPED_PRICES)})")
    if provider_of(model_name) != args.provider:
        refuse(
            f"--model {model_name}: {provider_of(model_name)}'s model; add "
            f"--provider {provider_of(model_name)}"
        )
    try:
        args.capacity = json.loads(args.input.read_text())
        args.inputs = inputs = inputs_from(args.capacity, args.processes, model_name)
    except (OSError, ValueError, KeyError) as error:
        refuse(f"--input {args.input}: {error}")
    for setting in args.set:
        name, _, text = setting.partition("=")
        if name not in inputs:
            refuse(f"--set {setting}: no input named {name!r} (the inputs table names them)")
        try:
            value = float(text)
        except ValueError:
            refuse(f"--set {setting}: {text!r} is not a number")
        if not math.isfinite(value) or value < 0:
            refuse(f"--set {setting}: {text!r} is not a number of zero or more")
        inputs[name] = Figure(value, "assumed", f"--set {setting}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(command_line, argv)
    model_name, capacity, inputs = args.model_name, args.capacity, args.inputs
    results = {
        title: model(inputs, scenario, args.provider, model_name)
        for title, scenario in SCENARIOS.items()
    }
    where = "provisional, " if capacity.get("provisional") else ""
    rows = capacity["processes"]
    host = args.processes or rows[0]["worker_processes"]
    header = (
        f"Model calls on {args.provider}, at {model_name}'s prices. The measured inputs: "
        f"{where}`python -m bench.capacity` "
        f"of {capacity['taken_at']}, {host} worker process(es), {capacity['steps']}-step runs, "
        f"model {1000 * capacity['delay_seconds']:.0f} ms a call, sandbox {capacity['sandbox']}, "
        f"{capacity['machine']['cpus']} cores."
    )
    print(render(inputs, results, header))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
