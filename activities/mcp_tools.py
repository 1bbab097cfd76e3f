"""MCP servers' tools, offered to runs like `@tool`s and run the same way: each call an activity.

`McpTools` holds a worker's servers (`activities.mcp_config`) and their connections
(`activities.mcp_sessions`). It serves two activities:

- `resolve_tools` (in place of the registry's own, under the same name): when a run starts it lists
  the servers' tools and returns their specs with the registry's, so the tools a run was offered
  are in its history and replay never talks to a server. An MCP spec is recorded whole (its
  description and schema too): they came from a server, not from this worker's code, and a
  worker without that server must still be able to tell the model about them.
- `call`, a dynamic activity: every activity type that is not registered otherwise comes here.
  The workflow schedules a tool call as an activity named after the tool, so an MCP call's
  activity type is its tool's name (`server__tool`), which the Web UI shows with its arguments.

A call that changes data is sent at most once (`tool_spec` gives it one attempt, and `call`
never sends a later attempt of it): a timeout or a lost worker may come after its server applied
it, and most servers ignore the idempotency key. A server opts in to its retries with
`retry_side_effects`.

A tool's name is always `SERVER__TOOL` (the server's name, two underscores, the tool's name, with
characters outside `[A-Za-z0-9_-]` made `_`; cut to 64 with a hash when longer): unique across
servers, within the providers' rules, and the same on every worker with the same config.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from mcp import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED,
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    Tool,
)
from mcp_types import RequestParamsMeta
from pydantic import ValidationError
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from ..workflows import tool_catalog
from ..workflows.activity_io import ToolActivityInput, ToolActivityResult
from ..workflows.outcomes import MAY_HAVE_TAKEN_EFFECT
from ..workflows.specs import ToolSpec
from ..workflows.state import RunTools, ToolSelection
from . import progress, telemetry
from ._heartbeat import heartbeating
from .mcp_config import McpConfig, McpServerConfig
from .mcp_sessions import McpConnection, McpServerGone
from .tools import DEFAULT_TOOLS, ToolRegistry, bounded_result

logger = logging.getLogger(__name__)

SEPARATOR = "__"
MAX_NAME = 64
LIST_SECONDS = 8.0
"""How long a server may take to list its tools when a run starts: under the 10 s the workflow
gives `resolve_tools`, so that a server that hangs fails the run with its own reason."""
REPORT_MARGIN = 0.1
"""The share of a call's attempt timeout (at most `MAX_REPORT_SECONDS`) kept back from its MCP
request: the request times out first, so that this worker reports the timeout, naming the
server and the call, before Temporal ends the attempt with a bare "StartToClose timeout" (and
before a retry could start while this attempt still holds the connection)."""
MAX_REPORT_SECONDS = 1.0
IDEMPOTENCY_META_KEY = "idempotencyKey"
"""The key of a call's idempotency key in its request's `_meta`: the same on every retry of the
call, for servers that de-duplicate (there is no standard key yet)."""
MAX_PAGES = 100

_UNFIXABLE_BY_RETRY = frozenset(
    {
        PARSE_ERROR,
        INVALID_REQUEST,
        METHOD_NOT_FOUND,
        INVALID_PARAMS,
        HEADER_MISMATCH,
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        UNSUPPORTED_PROTOCOL_VERSION,
        URL_ELICITATION_REQUIRED,
    }
)
"""JSON-RPC errors a retry of the same request cannot fix (temporalio-mcp's list): the model is
told (it may fix its arguments); the others are retried."""
_BROKEN_CONNECTION = frozenset({CONNECTION_CLOSED, REQUEST_TIMEOUT, UNSUPPORTED_PROTOCOL_VERSION})
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def exposed_name(server: str, tool: str) -> str:
    """`server__tool`, within `^[a-zA-Z0-9_-]{1,64}$`."""
    name = f"{server}{SEPARATOR}{_UNSAFE.sub('_', tool)}"
    if len(name) <= MAX_NAME and name == f"{server}{SEPARATOR}{tool}":
        return name
    # Changed or cut: a hash of the tool's own name keeps two such names apart.
    digest = hashlib.sha256(tool.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"


def server_of(name: str) -> str | None:
    """The server prefix of a tool name, if it has one."""
    prefix, separator, _ = name.partition(SEPARATOR)
    return prefix if separator else None


def hinted_read_only(tool: Tool) -> bool:
    """`readOnlyHint: true`, and no `destructiveHint: true` that says otherwise."""
    hints = tool.annotations
    return hints is not None and hints.read_only_hint is True and hints.destructive_hint is not True


def may_repeat(server: McpServerConfig, read_only: bool) -> bool:
    """Whether a call may be sent again after an attempt that may have reached the server."""
    return read_only or server.retry_side_effects


def tool_spec(server_name: str, server: McpServerConfig, tool: Tool) -> ToolSpec:
    """What the workflow is told of one MCP tool: read-only by its hints unless the config says
    otherwise; a side-effecting one gets a single attempt unless its server opts in."""
    read_only = server.read_only.get(tool.name, hinted_read_only(tool))
    retry = server.retry
    if not may_repeat(server, read_only):
        retry = retry.model_copy(update={"maximum_attempts": 1})
    description = tool.description or tool.title or tool.name
    return ToolSpec(
        name=exposed_name(server_name, tool.name),
        description=description,
        parameters=tool.input_schema or {"type": "object", "properties": {}},
        side_effects=not read_only,
        timeout_seconds=server.timeout_seconds,
        retry=retry,
        max_result_chars=server.max_result_chars,
        needs_approval=server.needs_approval,
    )


def render_call_result(result: CallToolResult) -> str:
    """A call's result as the model's text: structured content as JSON (it supersedes the text
    copy the spec asks servers to send with it), else the text blocks joined; images, audio and
    resources as a placeholder that names them."""
    parts: list[str] = []
    if result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    for block in result.content:
        if isinstance(block, TextContent):
            if result.structured_content is None:
                parts.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            kind = "image" if isinstance(block, ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]")
        elif isinstance(block, EmbeddedResource):
            mime = block.resource.mime_type or "no type"
            parts.append(f"[resource {block.resource.uri} ({mime}), not shown]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link {block.name}: {block.uri}]")
    return "\n".join(parts)


class McpServerDown(Exception):
    """A server could not be reached or listed."""


class _TimedOut(Exception):
    """A wait for a server ran out; its text is the whole reason."""


@dataclass(frozen=True)
class _Offered:
    server: str
    tool: str
    """The server's name of the tool."""
    repeatable: bool
    """`may_repeat`: a later attempt of a call may be sent."""
    changes_data: bool = True
    """Not declared read-only: a call that was sent may have taken effect, whatever came back."""


class McpTools:
    """A worker's MCP servers: their tools' specs and their calls' activities."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self._secrets = config.secrets
        self._connections = {
            name: McpConnection(name, server, self._reason)
            for name, server in config.servers.items()
        }
        self._offered: dict[str, _Offered] = {}
        """By exposed name, from the latest listings."""

    def activities(self, registry: ToolRegistry = DEFAULT_TOOLS) -> list[Callable[..., Any]]:
        """The `resolve_tools` activity, over `registry` and these servers, and the calls'."""

        @activity.defn(name=tool_catalog.RESOLVE_TOOLS)
        async def resolve_tools(selection: ToolSelection) -> RunTools:
            return await self.resolve(selection, registry)

        return [resolve_tools, self.call]

    def start(self) -> None:
        """Connect to every server in the background (a stdio server's first start can take
        seconds), so that the first run does not wait for it; a failure shows at run start."""
        for name in self._connections:
            task = asyncio.create_task(self._warm(name))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections.values()))

    def redact(self, text: str) -> str:
        """The text with every secret of the config (env and header values) blanked."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    async def list_server(self, name: str) -> list[ToolSpec]:
        """The server's tools, allow-listed, as specs; raises McpServerDown."""
        connection = self._connections[name]
        server = connection.server
        deadline = asyncio.get_running_loop().time() + LIST_SECONDS
        try:
            try:
                tools = await self._listed(connection, deadline)
            except MCPError as error:
                if error.code != CONNECTION_CLOSED:
                    raise
                # Found closed before it answered (a stdio server that died while idle, before
                # its exit was noticed): listing changes nothing, so ask again, once, as the
                # connection is restarted.
                tools = await self._listed(connection, deadline)
        except Exception as error:
            raise McpServerDown(self._reason(error)) from None
        if server.tools is not None:
            tools = [t for t in tools if t.name in server.tools]
        specs = [tool_spec(name, server, t) for t in tools]
        self._offered.update(
            {
                s.name: _Offered(
                    name, t.name, may_repeat(server, not s.side_effects), s.side_effects
                )
                for s, t in zip(specs, tools, strict=True)
            }
        )
        return specs

    async def _listed(self, connection: McpConnection, deadline: float) -> list[Tool]:
        """Every page of a server's tool list by `deadline` (the loop's time); a connection
        that breaks is retired. Raises _TimedOut saying which wait ran out."""
        try:
            async with asyncio.timeout_at(deadline):
                client = await connection.client()
        except TimeoutError:
            raise _TimedOut(f"it did not connect within {LIST_SECONDS:g} s") from None
        tools: list[Tool] = []
        cursor: str | None = None
        try:
            async with asyncio.timeout_at(deadline):
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
        except TimeoutError:
            connection.retire(client)
            raise _TimedOut(f"it did not list its tools within {LIST_SECONDS:g} s") from None
        except BaseException as error:
            closed = isinstance(error, MCPError) and error.code == CONNECTION_CLOSED
            connection.retire(client, closed=closed)
            raise
        return tools

    async def resolve(
        self, selection: ToolSelection, registry: ToolRegistry = DEFAULT_TOOLS
    ) -> RunTools:
        """The registry's tools for the run (as `ToolRegistry.resolver`) and the MCP servers' it
        asks for (all of them when it names none), listed now."""
        names = selection.names
        wanted_servers = list(self._connections)
        own_names: list[str] | None = None
        if names is not None:
            own_names = [n for n in names if server_of(n) not in self._connections]
            wanted_servers = [s for s in wanted_servers if any(server_of(n) == s for n in names)]
        try:
            own = registry.for_run(own_names)
        except KeyError as error:
            raise _configuration_error(f"the run asks for tools {error.args[0]}") from None
        listed = await asyncio.gather(
            *(self.list_server(s) for s in wanted_servers), return_exceptions=True
        )
        specs: list[ToolSpec] = []
        down: set[str] = set()
        notices: list[str] = []
        for server, outcome in zip(wanted_servers, listed, strict=True):
            if isinstance(outcome, McpServerDown):
                if not self.config.servers[server].optional:
                    raise _configuration_error(f"MCP server {server} is unreachable: {outcome}")
                logger.warning(
                    "MCP server %s is unreachable, the run goes on without it: %s", server, outcome
                )
                down.add(server)
                notices.append(
                    f"MCP server {server} (optional) is unreachable, so its tools are not "
                    f"offered: {outcome}"
                )
                continue
            if isinstance(outcome, BaseException):
                raise outcome
            specs.extend(outcome)
        if names is not None:
            offered = {s.name for s in specs}
            listed_servers = set(wanted_servers) - down
            missing = [n for n in names if server_of(n) in listed_servers and n not in offered]
            if missing:
                raise _configuration_error(
                    f"the run asks for tools its MCP servers do not offer: {', '.join(missing)}"
                )
            specs = [s for s in specs if s.name in names]
        clashes = sorted({s.name for s in specs} & {s.name for s in own.tools})
        if clashes:
            raise _configuration_error(f"MCP tools clash with registered tools: {clashes}")
        return own.model_copy(update={"tools": [*own.tools, *specs], "notices": notices})

    @activity.defn(dynamic=True)
    async def call(self, args: Sequence[RawValue]) -> ToolActivityResult:
        """One MCP tool call; its activity type is the tool's name."""
        name = activity.info().activity_type
        call = activity.payload_converter().from_payload(args[0].payload, ToolActivityInput)
        with telemetry.tool_span(name, call) as span:
            result = await self._call(name, call)
            span.record(result)
            return result

    async def _call(self, name: str, call: ToolActivityInput) -> ToolActivityResult:
        info = activity.info()
        timeout = info.start_to_close_timeout
        limit = timeout.total_seconds() if timeout else None
        deadline = None
        if limit is not None:
            margin = min(limit * REPORT_MARGIN, MAX_REPORT_SECONDS)
            deadline = asyncio.get_running_loop().time() + limit - margin
        await progress.report_retry(call.step, name, call_id=call.tool_call_id, tool=name)
        # For a wait that outlasts the attempt: which call it held up, and the attempt's limit.
        held_up = f"{name} (call {call.tool_call_id}, attempt {info.attempt})"
        if limit:
            held_up += f", whose timeout is {limit:g} s"
        try:
            async with asyncio.timeout_at(deadline):
                target = await self._target(name)
        except TimeoutError:
            failure = ApplicationError(
                f"MCP server {server_of(name)} did not list its tools in time for {held_up}",
                type="McpTimeout",
            )
            return self._not_sent(name, call, failure, retry=not _last_attempt(info))
        except ApplicationError as error:
            return self._not_sent(name, call, error, retry=not _last_attempt(info))
        if info.attempt > 1 and not target.repeatable:
            # Recorded with retries before this release (or by a worker that let them): the
            # first attempt may have been applied, and the server would apply it again.
            raise ApplicationError(
                f"{name} was not sent again: an earlier attempt may have reached MCP server "
                f"{target.server}, which does not opt in to retries of calls that change data",
                type="McpCallNotRepeated",
                non_retryable=True,
            )
        connection = self._connections[target.server]
        loop = asyncio.get_running_loop()
        async with heartbeating():
            try:
                async with asyncio.timeout_at(deadline):
                    client = await connection.client()
            except Exception as error:
                failure = self._retried(target.server, error)
                if isinstance(error, TimeoutError):
                    failure = ApplicationError(
                        f"MCP server {target.server} did not connect in time for {held_up}",
                        type="McpTimeout",
                    )
                retry = target.repeatable and not _last_attempt(info)
                return self._not_sent(name, call, failure, retry=retry)
            try:
                result = await client.call_tool(
                    target.tool,
                    call.arguments,
                    read_timeout_seconds=None if deadline is None else deadline - loop.time(),
                    meta=cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: call.idempotency_key}),
                )
            except MCPError as error:
                if error.code in _BROKEN_CONNECTION:
                    connection.retire(client, closed=error.code == CONNECTION_CLOSED)
                if error.code == REQUEST_TIMEOUT:
                    within = f"within its {limit:g} s timeout" if limit else "in time"
                    failure = ApplicationError(
                        f"MCP server {target.server} did not answer {name} (call "
                        f"{call.tool_call_id}, attempt {info.attempt}) {within}",
                        type="McpTimeout",
                    )
                    self._log_failure(call, name, failure)
                    raise failure from None
                if error.code in _UNFIXABLE_BY_RETRY:
                    text = self.redact(error.message)[:1000]
                    return ToolActivityResult(
                        content=f"Error: {name} was refused by its MCP server: {text} "
                        f"(JSON-RPC error {error.code}). It did not run.",
                        is_error=True,
                        attempt=info.attempt,
                    )
                raise self._retried(target.server, error) from None
            except ValidationError:
                # The request reached the server: a call that changes data may have been
                # applied, so its outcome is unknown (logged for compensation), as a @tool's
                # exception after its effect is.
                unknown = target.changes_data
                said = f" {MAY_HAVE_TAKEN_EFFECT}" if unknown else ""
                return ToolActivityResult(
                    content=f"Error: {name}'s MCP server sent a malformed result.{said}",
                    is_error=True,
                    attempt=info.attempt,
                    outcome_unknown=unknown,
                )
            except (asyncio.CancelledError, ApplicationError):
                raise
            except Exception as error:
                # The transport broke (a process that died, a dropped HTTP session): a retry
                # reconnects.
                connection.retire(client, closed=True)
                self._log_failure(call, name, error)
                raise self._retried(target.server, error) from None
        rendered = render_call_result(result)
        if result.is_error and not rendered.lower().startswith("error"):
            rendered = f"Error: {rendered or f'{name} failed'}"
        return self._bounded(call, rendered, is_error=result.is_error, attempt=info.attempt)

    def _not_sent(
        self, name: str, call: ToolActivityInput, failure: ApplicationError, *, retry: bool
    ) -> ToolActivityResult:
        """A call that failed before its request was sent: raised for a retry when it gets one,
        else an error result the model reads, which says that nothing happened (so the run
        logs no effect of unknown outcome)."""
        self._log_failure(call, name, failure)
        if retry:
            raise failure
        return ToolActivityResult(
            content=f"Error: {name} did not run: {failure.message}. Nothing was sent to its "
            "MCP server.",
            is_error=True,
            attempt=activity.info().attempt,
        )

    def _log_failure(self, call: ToolActivityInput, name: str, error: BaseException) -> None:
        reason = error.message if isinstance(error, ApplicationError) else self._reason(error)
        activity.logger.warning(
            "step %d: MCP tool %s failed (call %s, attempt %d): %s",
            call.step,
            name,
            call.tool_call_id,
            activity.info().attempt,
            reason,
        )

    async def _target(self, name: str) -> _Offered:
        """The server and tool of an exposed name, listing its server when this worker has not
        yet (a run that started on another worker)."""
        target = self._offered.get(name)
        server = server_of(name)
        if target is None and server in self._connections:
            try:
                await self.list_server(server)
            except McpServerDown as error:
                raise ApplicationError(
                    f"MCP server {server} is unreachable: {error}", type="McpServerDown"
                ) from None
            target = self._offered.get(name)
        if target is None:
            # Not a tool of this worker's: another worker of the task queue may have it.
            raise ApplicationError(
                f"no tool or MCP tool named {name} on this worker", type="ToolNotOnWorker"
            )
        return target

    def _bounded(
        self, call: ToolActivityInput, rendered: str, *, is_error: bool, attempt: int
    ) -> ToolActivityResult:
        """Bounded and externalised as a `@tool`'s result (activities/tools.py)."""
        return bounded_result(call, rendered, attempt=attempt, is_error=is_error)

    def _retried(self, server: str, error: BaseException) -> ApplicationError:
        return ApplicationError(
            f"MCP server {server}: {self._reason(error)}", type="McpTransportError"
        )

    def _reason(self, error: BaseException) -> str:
        """One line, secrets blanked: errors can quote a command line or a URL."""
        if isinstance(error, BaseExceptionGroup) and error.exceptions:
            return self._reason(error.exceptions[0])
        if isinstance(error, McpServerGone | _TimedOut):
            return self.redact(str(error))
        if isinstance(error, TimeoutError):
            return "no answer in time"
        text = str(error).strip().splitlines()
        detail = f": {text[0][:300]}" if text else ""
        return self.redact(f"{type(error).__name__}{detail}")

    async def _warm(self, name: str) -> None:
        try:
            await self._connections[name].client()
        except Exception as error:
            logger.warning("MCP server %s: not reachable yet: %s", name, self._reason(error))


def _last_attempt(info: activity.Info) -> bool:
    """This attempt is the last its retry policy allows (the run's deadline may end them
    sooner)."""
    policy = info.retry_policy
    if policy is None or policy.maximum_attempts <= 0:
        return False
    return info.attempt >= policy.maximum_attempts


def _configuration_error(message: str) -> ApplicationError:
    return ApplicationError(message, type="AgentConfigurationError", non_retryable=True)
