"""The agent that `durable-agent serve --agent FILE` offers through the agent protocols (A2A and
AG-UI, docs/agent-protocols.md). A client of those protocols sends a message, not a run's input:
the operator says once, in the file, everything else a run is (its model, tools, system prompt,
limits, approval policy, guardrails), in the contract's format (`durable-agent contract`), and
each message gives the prompt.

    served = load_served_agent(Path("agent.json"))
    agent_input = served.input("Where is my order?")

The file is read and checked when serve starts, so that a mistake in it is one line and exit
code 2 then, not a failed run at the first client's message. So is the A2A card file
(`--agent-card FILE`): what the operator says of the agent on its public Agent Card (its name,
description, version, provider, links and skills), in the card's own JSON; how to reach and
authenticate the agent stays serve's to say."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from a2a.types.a2a_pb2 import AgentCard
from google.protobuf.json_format import ParseDict, ParseError
from pydantic import ValidationError

from ..workflows.errors import AgentConfigurationError, AgentInputInvalid
from ..workflows.inputs import AgentInput
from ..workflows.payloads import refusal

MAX_AGENT_FILE_BYTES = 1_000_000
"""An agent file over this is refused: it describes an agent, and a run's whole input is bounded
(workflows/input_limits.py)."""
CARD_FIELDS = (
    "name",
    "description",
    "version",
    "provider",
    "documentationUrl",
    "iconUrl",
    "skills",
)
"""What a card file may say; the interfaces, capabilities and security schemes are serve's, since
they say how this server is reached and guarded."""
SET_BY_EACH_RUN = ("prompt", "carried", "fork")
"""Fields that are a run's own, never the agent's: the message is the prompt, and what a run
carries or forks from is set by the run."""


@dataclass(frozen=True)
class ServedAgent:
    """A run's input less its prompt (`template`: the file's JSON object, as given)."""

    template: dict[str, Any]
    card: dict[str, Any] = field(default_factory=dict)
    """The operator's A2A card fields (CARD_FIELDS, in the card's JSON), over serve's own."""

    def input(self, prompt: str, **fields: Any) -> AgentInput:
        """The input of a run that `prompt` starts, with `fields` over the template's (a
        protocol's own: the client's tools as `callback_tools`, a conversation).
        AgentInputInvalid when they make it invalid, naming each field and rule, as a client's
        input is refused (payloads.refusal)."""
        try:
            return AgentInput.model_validate({**self.template, **fields, "prompt": prompt})
        except ValidationError as error:
            raise refusal(error) from None

    @property
    def checks_tool_results(self) -> bool:
        """Its runs have tool-result guardrails (docs/guardrails.md)."""
        return bool((self.template.get("guardrails") or {}).get("tool_results"))

    @property
    def name(self) -> str:
        """What the agent is called where a protocol names it: its card's `name`, else the
        runs' `label`, else `durable-agent`."""
        return str(self.card.get("name") or self.template.get("label") or "durable-agent")


def load_served_agent(path: Path, card: Path | None = None) -> ServedAgent:
    """The agent described in `path`, with the A2A card fields in `card`. AgentConfigurationError,
    with a line that says what is wrong where, for a file that cannot be read or is not a JSON
    object; an agent file that sets a field that is a run's own or would not make a valid run's
    input; a card file with another field than CARD_FIELDS, or one the card's schema refuses."""
    template = _json_object(path, "--agent", "a run's input without its prompt")
    if own := [field for field in SET_BY_EACH_RUN if field in template]:
        raise AgentConfigurationError(
            f"--agent {path}: {', '.join(own)}: set by each run (the prompt is the client's"
            " message); leave it out"
        )
    served = ServedAgent(template, {} if card is None else _card(card))
    try:
        served.input("-")
    except AgentInputInvalid as error:
        raise AgentConfigurationError(f"--agent {path}: {error.message}") from None
    return served


def _card(path: Path) -> dict[str, Any]:
    fields = _json_object(path, "--agent-card", "the Agent Card's fields")
    if others := [name for name in fields if name not in CARD_FIELDS]:
        raise AgentConfigurationError(
            f"--agent-card {path}: {', '.join(others)}: serve says how it is reached and"
            f" guarded; a card file gives {', '.join(CARD_FIELDS)}"
        )
    try:
        ParseDict(fields, AgentCard())
    except ParseError as error:
        raise AgentConfigurationError(f"--agent-card {path}: {error}") from None
    return fields


def _json_object(path: Path, flag: str, what: str) -> dict[str, Any]:
    """The JSON object in `path`, read up to MAX_AGENT_FILE_BYTES; refused in a line that names
    `flag` and says the object is `what`."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_AGENT_FILE_BYTES + 1)
    except OSError as error:
        raise AgentConfigurationError(f"{flag} {path}: {error.strerror or error}") from None
    if len(raw) > MAX_AGENT_FILE_BYTES:
        raise AgentConfigurationError(f"{flag} {path}: over {MAX_AGENT_FILE_BYTES:,} bytes")
    try:
        loaded = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AgentConfigurationError(f"{flag} {path}: not JSON ({error})") from None
    if not isinstance(loaded, dict):
        raise AgentConfigurationError(f"{flag} {path}: a JSON object is {what}")
    return loaded
