"""The agent that `durable-agent serve --agent FILE` offers through the agent protocols (A2A and
AG-UI, docs/agent-protocols.md). A client of those protocols sends a message, not a run's input:
the operator says once, in the file, everything else a run is (its model, tools, system prompt,
limits, approval policy, guardrails), in the contract's format (`durable-agent contract`), and
each message gives the prompt.

    served = load_served_agent(Path("agent.json"))
    agent_input = served.input("Where is my order?")

The file is read and checked when serve starts, so that a mistake in it is one line and exit
code 2 then, not a failed run at the first client's message."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..workflows.errors import AgentConfigurationError
from ..workflows.inputs import AgentInput

MAX_AGENT_FILE_BYTES = 1_000_000
"""An agent file over this is refused: it describes an agent, and a run's whole input is bounded
(workflows/input_limits.py)."""
SET_BY_EACH_RUN = ("prompt", "carried", "fork")
"""Fields that are a run's own, never the agent's: the message is the prompt, and what a run
carries or forks from is set by the run."""


@dataclass(frozen=True)
class ServedAgent:
    """A run's input less its prompt (`template`: the file's JSON object, as given)."""

    template: dict[str, Any]

    def input(self, prompt: str, **fields: Any) -> AgentInput:
        """The input of a run that `prompt` starts, with `fields` over the template's (a
        protocol's own: the client's tools as `callback_tools`, a conversation). ValidationError
        when they make it invalid, as a client's input would."""
        return AgentInput.model_validate({**self.template, **fields, "prompt": prompt})

    @property
    def name(self) -> str:
        """What the agent is called where a protocol names it: the runs' `label`, else
        `durable-agent`."""
        return str(self.template.get("label") or "durable-agent")


def load_served_agent(path: Path) -> ServedAgent:
    """The agent described in `path`. AgentConfigurationError, with a line that says what is
    wrong where, for a file that cannot be read, is not a JSON object, sets a field that is a
    run's own, or would not make a valid run's input."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_AGENT_FILE_BYTES + 1)
    except OSError as error:
        raise AgentConfigurationError(f"--agent {path}: {error.strerror or error}") from None
    if len(raw) > MAX_AGENT_FILE_BYTES:
        raise AgentConfigurationError(f"--agent {path}: over {MAX_AGENT_FILE_BYTES:,} bytes")
    try:
        template = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AgentConfigurationError(f"--agent {path}: not JSON ({error})") from None
    if not isinstance(template, dict):
        raise AgentConfigurationError(
            f"--agent {path}: a JSON object is a run's input without its prompt"
        )
    if own := [field for field in SET_BY_EACH_RUN if field in template]:
        raise AgentConfigurationError(
            f"--agent {path}: {', '.join(own)}: set by each run (the prompt is the client's"
            " message); leave it out"
        )
    served = ServedAgent(template)
    try:
        served.input("-")
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise AgentConfigurationError(f"--agent {path}: {where}: {first['msg']}") from None
    return served
