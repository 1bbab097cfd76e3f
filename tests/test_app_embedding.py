"""A Temporal app takes the agent in as a user's app does: installed, beside files of its own.

The app is the one docs/client.md shows, its four files read from there: `workflows.py`,
`activities.py`, `worker.py` and `starter.py`, named as samples-python names them, so that any
module of the project still imported by a bare `workflows` or `worker` would collide with them.
The project is installed with `pip install .` (not editable) into a venv of its own; the
dependencies come from the test venv's site-packages, read through a path file, so that the
install takes seconds. The app's worker serves its own workflow and an agent run with its own
`@tool`; its starter runs its workflow, starts the agent run with a plan, approves the plan by
update and prints the result.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parent.parent
APP_FILES = ("activities.py", "workflows.py", "worker.py", "starter.py")
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
INSTALLED = {"durable_agent", f"durable_agent_loop-{VERSION}.dist-info"}
"""What `pip install .` may add to site-packages: one import name and its metadata."""


def app_files() -> dict[str, str]:
    """The app's files as docs/client.md shows them: each code block that starts `# NAME.py`."""
    text = (ROOT / "docs" / "client.md").read_text()
    blocks = re.findall(r"```python\n# (\w+\.py)\n(.*?)```", text, re.S)
    return dict(blocks)


def printed_by_the_starter() -> str:
    """The line docs/client.md says the starter prints."""
    text = (ROOT / "docs" / "client.md").read_text()
    found = re.search(r"The starter prints:\n\n```text\n(.*?)\n```", text, re.S)
    assert found, "docs/client.md does not show what the starter prints"
    return found.group(1)


def test_the_docs_show_the_whole_app() -> None:
    assert sorted(app_files()) == sorted(APP_FILES)
    assert json.loads(printed_by_the_starter())["plan"] == "approved"


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A venv with the project installed from a copy of this checkout, non-editable."""
    base = tmp_path_factory.mktemp("installed")
    source = base / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "__pycache__", "*.egg-info", "build", ".*_cache", "*.db"
        ),
    )
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    before = set(os.listdir(purelib))
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-cache-dir", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    added = set(os.listdir(purelib)) - before
    assert added == INSTALLED, sorted(added)
    # The dependencies: this venv's, after the app venv's own (which hold the project).
    (purelib / "test-venv-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    yield python


def test_the_install_claims_one_import_name(installed_python: Path) -> None:
    """Nothing but durable_agent and its metadata in site-packages (the fixture checks the
    listing), and the package imports from there, not from the checkout."""
    done = subprocess.run(
        [
            str(installed_python),
            "-c",
            "import durable_agent.workflows.agent as a; print(a.__file__)",
        ],
        cwd=installed_python.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    where = Path(done.stdout.strip())
    assert where.parts[-3:] == ("durable_agent", "workflows", "agent.py")
    assert ROOT not in where.parents
    # The console's files ship in the package (served as they are: no build at install).
    console = where.parents[1] / "serving" / "console"
    shipped = sorted(p.name for p in console.iterdir())
    assert shipped == ["console.css", "console.js", "favicon.svg", "index.html"]


def test_an_app_serves_its_workflow_and_an_agent_run_on_one_worker(
    installed_python: Path, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    for name, text in app_files().items():
        (app / name).write_text(text)
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "PYTHONPATH": "",
    }
    worker = subprocess.Popen(
        [str(installed_python), "worker.py"],
        cwd=app,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        ready = worker.stdout.readline()
        assert ready.strip() == "worker ready", ready + (
            worker.stderr.read() if worker.stderr else ""
        )
        done = subprocess.run(
            [str(installed_python), "starter.py"],
            cwd=app,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        worker.send_signal(signal.SIGINT)
        try:
            _, worker_err = worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, worker_err = worker.communicate()
    assert done.returncode == 0, done.stderr + "\nworker:\n" + worker_err[-3000:]
    last_line = done.stdout.strip().splitlines()[-1]
    printed = json.loads(last_line)
    assert last_line == printed_by_the_starter()
    assert printed["greeting"] == "Hello, Ada!"
    assert printed["plan"] == "approved"
    # The app's own tool answered: its stock table says 7 of sku-1.
    assert json.loads(printed["answer"].removeprefix("In stock: ")) == {
        "sku": "sku-1",
        "in_stock": 7,
    }
