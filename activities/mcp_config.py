"""MCP servers a worker connects to, read from a JSON file (`--mcp-config`, `AGENT_MCP_CONFIG`).

The file has the shape Claude Desktop, Cursor and VS Code use, so an existing one works as is:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
                  "env": {"TOKEN": "${FILES_TOKEN}"}, "cwd": "/srv"},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${KEY}"}}
    }}

Beside those keys, a server may carry this project's own (see `McpServerConfig`). `${NAME}` in an
`env` or `headers` value is read from the worker's environment, so secrets need not sit in the
file. Those values are the server's secrets: they stay in the worker, and `McpConfig.secrets`
lists them so that error messages can be scrubbed before they reach a history or a log.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..workflows.errors import AgentConfigurationError
from ..workflows.specs import DEFAULT_MAX_RESULT_CHARS, RetrySettings

MCP_CONFIG_VARIABLE = "AGENT_MCP_CONFIG"
SERVER_NAME = re.compile(r"^[A-Za-z0-9-]{1,30}$")
"""Server names prefix their tools' names (`server__tool`), so they are short and have no `_`:
the first `__` of a tool's name is where its server's name ends."""
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class McpServerConfig(BaseModel):
    """One server: stdio (`command`) or streamable HTTP (`url`), and how its tools are run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The shape every MCP client reads.
    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    """Added to the worker's environment for the server's process (secrets welcome)."""
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    """Sent with every HTTP request (secrets welcome)."""
    type: Literal["stdio", "http", "streamable-http", "streamableHttp"] | None = None
    """Optional, as in VS Code's files; the transport follows from command or url anyway."""

    # This project's keys.
    optional: bool = False
    """A server that cannot be reached when a run starts fails the run, unless it is optional:
    then the run goes on without its tools, and its trace says so."""
    tools: list[str] | None = None
    """Offer only these of the server's tools (by the server's names); all when absent."""
    read_only: dict[str, bool] = {}
    """Per tool (server's name): true runs it as read-only (concurrent, no approval by default,
    retried) and false as side-effecting, whatever its `readOnlyHint` and `destructiveHint`
    say."""
    timeout_seconds: float = Field(default=30.0, gt=0)
    """One attempt of a call, as a tool's `timeout_seconds`."""
    retry: RetrySettings = RetrySettings()
    """The retry policy of the server's read-only calls (transport and protocol failures), and
    of its side-effecting ones too with `retry_side_effects`."""
    retry_side_effects: bool = False
    """Retry side-effecting calls by `retry` as well. Off, such a call is sent at most once: a
    timeout or a lost worker may come after the server applied it, and a server that ignores
    `_meta.idempotencyKey` would apply it again. Turn it on only for a server that
    de-duplicates by that key, or whose calls are safe to repeat."""
    needs_approval: bool | None = None
    """As `@tool(needs_approval=...)`, for all the server's tools: None asks for the
    side-effecting ones only."""
    max_result_chars: int = Field(default=DEFAULT_MAX_RESULT_CHARS, gt=0)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        if self.url is not None and (self.args or self.env or self.cwd):
            raise ValueError("args, env and cwd are for stdio servers (command), not url")
        if self.command is not None and self.headers:
            raise ValueError("headers are for HTTP servers (url), not command")
        return self


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    servers: dict[str, McpServerConfig] = Field(default={}, alias="mcpServers")

    @property
    def secrets(self) -> list[str]:
        """Every env and header value, longest first (so that a scrub replaces whole values)."""
        values = {v for s in self.servers.values() for v in [*s.env.values(), *s.headers.values()]}
        return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def load_mcp_config(path: str | os.PathLike[str]) -> McpConfig:
    """The servers of a config file, `${NAME}`s filled from the environment.

    Raises AgentConfigurationError with a one-line reason (it never quotes a value)."""
    where = f"MCP config {path}"
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise AgentConfigurationError(f"{where}: {error.strerror or error}") from None
    except json.JSONDecodeError as error:
        message = f"{where}: not JSON ({error.msg}, line {error.lineno})"
        raise AgentConfigurationError(message) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict):
        raise AgentConfigurationError(f'{where}: expected {{"mcpServers": {{"NAME": {{...}}}}}}')
    try:
        config = McpConfig.model_validate(raw)
    except ValidationError as error:
        first = error.errors(include_url=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"])
        raise AgentConfigurationError(f"{where}: {field}: {first['msg']}") from None
    for name, server in config.servers.items():
        if not SERVER_NAME.match(name):
            raise AgentConfigurationError(
                f"{where}: server name {name!r} must be 1-30 letters, digits or '-' "
                "(it prefixes its tools' names)"
            )
        server_where = f"{where}: mcpServers.{name}"
        config = _with_servers(
            config,
            name,
            server.model_copy(
                update={
                    "env": _expanded(server.env, f"{server_where}.env"),
                    "headers": _expanded(server.headers, f"{server_where}.headers"),
                }
            ),
        )
    return config


def mcp_config_from(path: str | None) -> McpConfig | None:
    """The config named by a flag, else by AGENT_MCP_CONFIG; None when neither is set."""
    path = path or os.environ.get(MCP_CONFIG_VARIABLE) or None
    return None if path is None else load_mcp_config(path)


def _with_servers(config: McpConfig, name: str, server: McpServerConfig) -> McpConfig:
    return config.model_copy(update={"servers": {**config.servers, name: server}})


def _expanded(values: dict[str, str], where: str) -> dict[str, str]:
    def fill(key: str, value: str) -> str:
        def variable(match: re.Match[str]) -> str:
            found = os.environ.get(match.group(1))
            if found is None:
                raise AgentConfigurationError(
                    f"{where}.{key}: the environment has no {match.group(1)}"
                )
            return found

        return _VARIABLE.sub(variable, value)

    return {key: fill(key, value) for key, value in values.items()}
