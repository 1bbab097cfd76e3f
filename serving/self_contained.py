"""A whole backend in this process, for the CLI's self-contained commands (`run` and `chat`
without --address, `serve` without --address): the embedded dev server with its Web UI and a
worker on it, checked before anything starts.

    check_worker(tools)                         # a bad toolkit or store: an error, nothing started
    async with self_contained(task_queue) as backend:
        run = await backend.agents.start(agent_input)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..activities.mcp_tools import McpTools
from ..client.agent_client import AgentClient
from .dev_server import detached_dev_server, embedded_dev_server, free_port
from .worker import build_worker


@dataclass(frozen=True)
class SelfContained:
    agents: AgentClient
    web_ui: str
    """The embedded server's Web UI, http://127.0.0.1:PORT."""


@asynccontextmanager
async def self_contained(
    task_queue: str, *, detached: bool = False, mcp: McpTools | None = None
) -> AsyncIterator[SelfContained]:
    """The embedded dev server (with its Web UI) and a worker on `task_queue`, until the block
    ends. `detached`: the server in a session of its own, which a terminal's Ctrl-C does not
    reach (a conversation takes Ctrl-C as an interrupt). `mcp` is connected by the worker and
    closed with it."""
    ui_port = free_port()
    dev_server = detached_dev_server if detached else embedded_dev_server
    async with dev_server(ui_port=ui_port) as env, build_worker(env.client, task_queue, mcp=mcp):
        yield SelfContained(AgentClient(env.client, task_queue), f"http://127.0.0.1:{ui_port}")
