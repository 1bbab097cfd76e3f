"""What the session's dev server has been asked, by operation: its own count of the requests its
frontend served (`service_requests` on its Prometheus endpoint), for the tests of what serving a
run costs the server. The dev server counts every caller's requests: a test reads the difference
over a span in which only the caller it measures asks.

The server publishes its counts about once a second, all at once: `served` asks it something
nobody else does (GetClusterInfo) and waits until that is counted, so that every request made
before is counted too."""

from __future__ import annotations

import re
from collections import Counter

import httpx2 as httpx
from temporalio.api.workflowservice.v1 import GetClusterInfoRequest
from temporalio.client import Client

from tests.helpers import eventually

_COUNTED = re.compile(
    r'^service_requests\{namespace="(?:default|_unknown_)",operation="(\w+)",'
    r'service_name="frontend"\} (\d+)$',
    re.MULTILINE,
)
_MARKER = "GetClusterInfo"


async def _counts(metrics_port: int) -> Counter[str]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
    return Counter({operation: int(count) for operation, count in _COUNTED.findall(text)})


async def served(client: Client, metrics_port: int) -> Counter[str]:
    """The requests the frontend has served so far, by operation (DescribeWorkflowExecution,
    QueryWorkflow, ...), every request made before the call included."""
    marked = (await _counts(metrics_port))[_MARKER]
    await client.workflow_service.get_cluster_info(GetClusterInfoRequest())
    counts = Counter[str]()

    async def published() -> bool:
        nonlocal counts
        counts = await _counts(metrics_port)
        return counts[_MARKER] > marked

    await eventually(published, timeout=10, interval=0.1, what="the server's counts published")
    return counts
