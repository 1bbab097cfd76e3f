"""A plain install (no extras) serves a whole run: the entry points, every module they import and
the demo run itself work with every package outside the base dependencies hidden.

The packages of the `otel`, `test` and `bench-peers` extras are installed in the test venv, so a
module that needs one would pass every other test here; `tests/base_install.py` hides them (read
from the installed metadata, never listed by hand). `.ci/run` also runs the README's first command
in a bare venv, which is the same guard from outside."""

from __future__ import annotations

import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.base_install import base_distributions

REPO = Path(__file__).resolve().parent.parent
RUNNER = str(REPO / "tests" / "base_install.py")
PROMPT = "Where is my latest order? My email is a@b.com."


@pytest.fixture(scope="module")
def base_env() -> dict[str, str]:
    hidden = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENT_PAYLOAD_KEYS")
    env = {k: v for k, v in os.environ.items() if k not in hidden and not k.startswith("OTEL_")}
    env["BASE_DISTRIBUTIONS"] = ",".join(sorted(base_distributions()))
    return env


def run_base(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, RUNNER, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def project_modules() -> list[str]:
    """Every module of the installed package, by its import name: each package pyproject.toml
    installs, and the modules in it (in the checkout, durable_agent/ holds the face alone, so
    each package is listed on its own)."""
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    names = []
    for package in packages:
        names.append(package)
        found = importlib.util.find_spec(package)
        assert found is not None and found.submodule_search_locations, package
        names += [
            f"{package}.{m.name}"
            for m in pkgutil.iter_modules(found.submodule_search_locations)
            if not m.ispkg
        ]
    return names


def test_the_base_closure_is_read_from_metadata() -> None:
    names = base_distributions()
    assert {"durable-agent-loop", "temporalio", "pydantic", "openai", "anthropic"} <= names
    assert "opentelemetry-api" in names
    # temporalio[pydantic] is asked for; the extras of the project itself are not.
    assert "opentelemetry-sdk" not in names and "pytest" not in names


def test_the_guard_hides_what_only_an_extra_brings(base_env: dict[str, str]) -> None:
    code = (
        "import opentelemetry.trace\n"
        "try:\n    import opentelemetry.sdk.trace\nexcept ModuleNotFoundError as e:\n"
        "    print('hidden', e.name)\n"
        "try:\n    import temporalio.contrib.opentelemetry\nexcept ModuleNotFoundError as e:\n"
        "    print('hidden', e.name)\n"
        "try:\n    import yaml\nexcept ModuleNotFoundError as e:\n    print('hidden', e.name)\n"
    )
    done = run_base("-c", code, env=base_env)
    assert done.returncode == 0, done.stderr
    hidden = done.stdout.splitlines()
    assert len(hidden) == 3, done.stdout
    # temporalio's contrib module is temporalio's own file: it is refused at the SDK it imports.
    assert hidden[0].startswith("hidden opentelemetry.sdk")
    assert hidden[1].startswith("hidden opentelemetry.sdk")
    assert hidden[2] == "hidden yaml"


def test_every_module_of_the_worker_starter_and_client_imports(base_env: dict[str, str]) -> None:
    modules = project_modules()
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = run_base("-c", code, env=base_env)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert "durable_agent.workflows.agent" in loaded and "durable_agent.serving.plugin" in loaded
    assert "durable_agent.activities.model_call" in loaded
    assert not [m for m in loaded if m.startswith("opentelemetry.sdk")]


def test_worker_help_works_on_a_base_install(base_env: dict[str, str]) -> None:
    done = run_base("worker.py", "--help", env=base_env)
    assert done.returncode == 0, done.stderr
    assert "--task-queue" in done.stdout


def test_the_demo_runs_on_a_base_install(base_env: dict[str, str], tmp_path: Path) -> None:
    """The README's first command, on the embedded dev server, with tracing off: it crashed on a
    fresh machine when building the worker imported temporalio.contrib.opentelemetry."""
    env = {**base_env, "AGENT_DEMO_DB": str(tmp_path / "demo.db")}
    env["AGENT_RESULT_STORE"] = str(tmp_path / "results.db")
    env["AGENT_MESSAGE_STORE"] = str(tmp_path / "messages.db")
    done = run_base("starter.py", PROMPT, "--json", env=env, timeout=90)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed"
    assert "#1042" in out["answer"]


def test_tracing_asked_for_without_the_extra_is_a_one_line_error(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**base_env, "OTEL_TRACES_EXPORTER": "console", "AGENT_DEMO_DB": str(tmp_path / "d.db")}
    done = run_base("worker.py", "--address", "127.0.0.1:1", env=env)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert 'pip install -e ".[otel]"' in done.stderr
