"""The static summary and details a run is started with, which the Web UI shows on its page
and in the list: one line of what it was asked, and the model, the limits, the tools and the
approvals it runs with. Set by the client from the run's input (AgentClient.start), so they
cost the run nothing; what the run does as it goes is reporting.py's. Deterministic code only.
"""

from __future__ import annotations

from .inputs import AgentInput
from .outcomes import count
from .reporting import code_span, shortened

SUMMARY_CHARS = 120
"""A run's static summary: one line, the label and the start of the prompt's first line."""
DETAILS_TOOLS = 30
"""Tools named in a run's static details; the rest are counted."""


def run_summary(agent_input: AgentInput) -> str:
    """One line for the run's Summary: its label and the start of its prompt's first line."""
    first_line = next(
        (line.strip() for line in agent_input.prompt.splitlines() if line.strip()), ""
    )
    summary = f"{agent_input.label}: {first_line}" if agent_input.label else first_line
    return shortened(summary or "(empty prompt)", SUMMARY_CHARS)


def run_details(agent_input: AgentInput) -> str:
    """The run's static details (Markdown): the model, the limits and the tools offered."""
    model = agent_input.model
    limits = agent_input.limits
    bounds = [f"{limits.max_steps} steps"]
    if limits.max_cost_usd is not None:
        bounds.append(f"\\${limits.max_cost_usd:g}")
    if limits.max_total_tokens is not None:
        bounds.append(f"{limits.max_total_tokens:,} tokens")
    if limits.max_context_tokens is not None:
        bounds.append(f"{limits.max_context_tokens:,} context tokens")
    if limits.max_wall_seconds is not None:
        bounds.append(f"{limits.max_wall_seconds:g} s of wall time")
    if agent_input.tools is None:
        tools = "every tool its worker registered"
    else:
        names = [code_span(name) for name in agent_input.tools[:DETAILS_TOOLS]]
        more = len(agent_input.tools) - DETAILS_TOOLS
        tools = ", ".join(names) + (f" and {count(more, 'more')}" if more > 0 else "") or "none"
    extras = [
        *(["`submit_plan` (plan mode: a person approves the plan)"] if agent_input.plan else []),
        *(["`delegate` (sub-agents)"] if agent_input.sub_agents else []),
    ]
    if (mode := agent_input.code_mode) is not None:
        extras.append(
            "`run_code` (code mode: a script calls the tools, each call as a direct one; at "
            f"most {count(mode.max_calls, 'call')}, {mode.max_cpu_seconds:g} s of execution and "
            f"{mode.max_memory_bytes // 1024**2:,} MiB a script)"
        )
    price = model.price
    made_up = (
        "a made-up price (the scripted model costs nothing) of "
        if model.provider == "scripted"
        else ""
    )
    priced = (
        f", priced by the run at {made_up}\\${price.input:g} / \\${price.output:g} per million "
        "input / output tokens"
        if price is not None
        else ""
    )
    policy = agent_input.tool_approval
    if policy.approve_all:
        approvals = "no call waits for a person (approve_all)"
    else:
        allowed = ", ".join(code_span(name) for name in policy.allow)
        approvals = "calls of tools that change data wait for a person" + (
            f", except {allowed}" if allowed else ""
        )
        if (auto := policy.auto_mode) is not None:
            judged = ", ".join(code_span(tool) for tool in auto.tools)
            if auto.default is not None:
                judged = f"{judged}, and any other" if judged else "every one"
            judge = f"{code_span(auto.judge.provider)} {code_span(auto.judge.model)}"
            approvals += (
                f"; auto mode: a judge ({judge}) decides first the calls of {judged or 'none'}, "
                "and hands a person those it is not sure of"
            )
    lines = [
        f"- **Model**: {code_span(model.provider)} {code_span(model.model)}{priced}",
        f"- **Limits**: {', '.join(bounds)}; a person may take "
        f"{agent_input.approval_timeout_seconds:g} s to decide",
        f"- **Tools**: {tools}" + (f"; also {', '.join(extras)}" if extras else ""),
        f"- **Approvals**: {approvals}",
    ]
    if agent_input.label:
        lines.append(f"- **Label**: {code_span(agent_input.label)}")
    return "\n".join(lines)
