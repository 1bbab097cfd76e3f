"""Sizing: what a fleet needs for a workload, modelled from bench.capacity's per-step figures.

    python -m bench.sizing [--input CAPACITY_JSON] [--processes N] [--provider openai|anthropic]
                           [--set NAME=VALUE ...] [--json PATH]

Reads what `python -m bench.capacity` measured (`--input`, by default the committed
bench/sizing_input.json, which docs/sizing.md is generated from), and for each scenario (a
million 10-step runs a day, a million 100-step runs a day, 10,000 conversations open for a week)
prints what it needs: Temporal actions a second and their cost on Temporal Cloud, persistence
transactions and history shards for a self-hosted cluster, worker processes and memory, model
calls against the provider's rate limits, and the size of the stores. Each limit is checked,
and the one with the highest utilisation is the one that binds first.

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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from durable_agent.cli.plumbing import OneLineArgumentParser

REPO = Path(__file__).resolve().parent.parent
DEFAULT_INPUT = REPO / "bench" / "sizing_input.json"
SECONDS_A_DAY = 86_400
HOURS_A_MONTH = 730  # 8,760 hours a year / 12
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
    "cpu_utilisation_target": assumed(0.7, "worker cores kept 30% free for bursts and replays"),
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


def model(inputs: dict[str, Figure], scenario: dict[str, float], provider: str) -> dict[str, Any]:
    """What the scenario needs, and each limit's utilisation; the first in `limits` binds."""
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
    return "\n".join(lines)


def inputs_from(capacity: dict[str, Any], processes: int | None) -> dict[str, Figure]:
    return measured(capacity, processes) | PUBLISHED | ASSUMED


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(
        prog="python -m bench.sizing", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="a capacity JSON")
    parser.add_argument("--processes", type=int, help="the host row to use (default: the first)")
    parser.add_argument("--provider", choices=("openai", "anthropic"), default="openai")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="change an input"
    )
    parser.add_argument("--json", type=Path, help="also write the model here")
    args = parser.parse_args(argv)
    try:
        capacity = json.loads(args.input.read_text())
        inputs = inputs_from(capacity, args.processes)
    except (OSError, ValueError, KeyError) as error:
        parser.error(f"--input {args.input}: {error}")
    for setting in args.set:
        name, _, text = setting.partition("=")
        if name not in inputs:
            parser.error(f"--set {setting}: no input named {name!r} (the inputs table names them)")
        try:
            value = float(text)
        except ValueError:
            parser.error(f"--set {setting}: {text!r} is not a number")
        inputs[name] = Figure(value, "assumed", f"--set {setting}")
    results = {
        title: model(inputs, scenario, args.provider) for title, scenario in SCENARIOS.items()
    }
    where = "provisional, " if capacity.get("provisional") else ""
    rows = capacity["processes"]
    host = args.processes or rows[0]["worker_processes"]
    header = (
        f"Model calls on {args.provider}. The measured inputs: {where}`python -m bench.capacity` "
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
