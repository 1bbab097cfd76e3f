"""The run's tools: resolved once as the run starts (run_setup.settle, each notice of a tool
the run goes without told once), offered at each step as plan mode and the run's state allow,
and the facts by which dispatch.py plans a reply. Deterministic code only."""

from __future__ import annotations

from temporalio import workflow

from . import code_mode, dispatch, run_setup
from .context import RunContext
from .plan_gate import PlanGate
from .reporting import Reporter
from .specs import ToolSpec


class Toolbox:
    def __init__(self, ctx: RunContext, reporter: Reporter, plan_gate: PlanGate) -> None:
        self._ctx, self._reporter, self._plan_gate = ctx, reporter, plan_gate
        self.tools: dict[str, ToolSpec] = {}
        """The run's own tools, by name: filled when the run resolves them, before step 1 (the
        tool runner shares this dict)."""
        self._read_result: ToolSpec | None = None
        self._run_code: ToolSpec | None = None

    async def resolve(self, told: list[str]) -> None:
        """Read the run's tools (recorded: see run_setup.settle); `told`: the notices said
        already, before a continue-as-new."""
        ctx = self._ctx
        run_tools = await run_setup.settle(ctx.input, ctx.state, ctx.behaviours)
        for notice in run_tools.notices:
            if notice not in told:
                workflow.logger.warning("%s", notice)
                self._reporter.publish("tools_unavailable", text=notice)
        self.tools.clear()
        self.tools.update({spec.name: spec for spec in run_tools.tools})
        self._read_result = run_tools.read_result
        self._run_code = code_mode.run_code(ctx.input, run_tools.tools)

    def offered(self) -> list[ToolSpec]:
        agent_input = self._ctx.input
        return dispatch.offered_tools(
            self.tools,
            sub_agents=agent_input.sub_agents,
            read_result=self._read_result if self._ctx.state.externalised else None,
            plan_mode=agent_input.plan,
            plan_approved=self._plan_gate.approved,
            output_schema=agent_input.output_schema,
            run_code=self._run_code,
        )

    def facts(self) -> dispatch.RunFacts:
        agent_input = self._ctx.input
        return dispatch.RunFacts(
            tools=self.tools,
            offered=self.offered(),
            plan_mode=agent_input.plan,
            plan_approved=self._plan_gate.approved,
            output_schema=agent_input.output_schema,
            policy=agent_input.tool_approval,
            remembered=self._ctx.state.remembered,
            behaviours=self._ctx.behaviours,
        )
