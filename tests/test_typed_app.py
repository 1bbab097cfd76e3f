"""An app's own code, type-checked against the package as a user installs it: mypy --strict and
pyright's strict mode find no error in it, and find each misuse they must.

The app (tests/typed_app/) is written as the docs write one: a read-only tool, a tool a person
approves, a tool with a compensation that reads its call through `current_call()`, a callback
tool, approval predicates, a plugin with stores of its own, a client that starts a run, answers
its callback and reviews what waits, and the app's tests calling its tools as functions. Its
misuse.py holds what the checkers must refuse, each line marked with the error.

The app is copied out of the checkout and checked there, against a venv of its own into which a
copy of the checkout (its files as a clone would have them) is installed as the README says,
`pip install -e .`, and as `pip install .`. The dependencies come from the test venv through a
path file, as in tests/test_app_embedding.py, so that the install takes seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.package_layout import ROOT

APP = ROOT / "tests" / "typed_app"
CONFIG = """\
[tool.mypy]
strict = true

[tool.pyright]
typeCheckingMode = "strict"
"""
"""The app's pyproject.toml: both checkers at their strictest."""
INSTALLS = {"editable": ["-e", "."], "plain": ["."]}
"""`pip install -e .` (the README's command) and `pip install .` (a non-editable install)."""
MARKER = re.compile(r"# error: mypy\[([\w,-]+)\] pyright\[([\w,]+)\]")
"""What misuse.py writes after a line that must fail: `# error: mypy[CODE] pyright[RULE,...]`."""
Found = set[tuple[str, int, str]]
"""(file, line, error code) of each error a checker reports."""


class App(NamedTuple):
    folder: Path
    python: Path
    """The app's venv, where the package is installed."""


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def checkout_copy(into: Path) -> Path:
    """This checkout's files as a clone has them, uncommitted changes included, and nothing it
    ignores (no build/, no .venv)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


@pytest.fixture(scope="module")
def mypy_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for both installs: the dependencies are the same files in each."""
    return tmp_path_factory.mktemp("mypy-cache")


@pytest.fixture(scope="module", params=sorted(INSTALLS))
def app(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> App:
    base = tmp_path_factory.mktemp(f"typed-{request.param}")
    checkout = checkout_copy(base / "checkout")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    install = [
        "install",
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        *INSTALLS[request.param],
    ]
    done = subprocess.run(
        [str(python), "-m", "pip", *install],
        cwd=checkout,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "test-venv-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    folder = base / "app"
    shutil.copytree(APP, folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "pyproject.toml").write_text(CONFIG)
    return App(folder, python)


def app_files() -> list[str]:
    return sorted(path.name for path in APP.glob("*.py"))


def expected(checker: int) -> Found:
    """The errors misuse.py marks, for mypy (0) or pyright (1)."""
    lines = (APP / "misuse.py").read_text().splitlines()
    return {
        ("misuse.py", number, code)
        for number, line in enumerate(lines, start=1)
        if (marked := MARKER.search(line))
        for code in marked.group(checker + 1).split(",")
    }


def test_the_app_shows_every_pattern_and_misuse_marks_its_errors() -> None:
    text = "\n".join((APP / name).read_text() for name in app_files())
    for pattern in (
        "@tool(timeout_seconds=10)",
        "@tool(side_effects=True, needs_approval=True)",
        "compensation=reinstate_order",
        "current_call()",
        "@callback_tool(",
        "@approval_predicate",
        "stores=Stores(",
        "await agents.start(",
        "await waiting_runs(agents)",
    ):
        assert pattern in text, pattern
    assert len({line for _, line, _ in expected(0)} & {line for _, line, _ in expected(1)}) >= 6


def test_mypy_strict_finds_no_error_in_the_app_and_each_misuse(app: App, mypy_cache: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--python-executable",
            str(app.python),
            "--cache-dir",
            str(mypy_cache),
            *app_files(),
        ],
        cwd=app.folder,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = {
        (file, int(line), code)
        for file, line, code in re.findall(
            r"^(\S+\.py):(\d+): error: .*\[([\w-]+)\]$", done.stdout, re.M
        )
    }
    assert found == expected(0), done.stdout + done.stderr
    assert done.returncode == 1  # those errors, and nothing that stopped mypy


def test_pyright_strict_finds_no_error_in_the_app_and_each_misuse(app: App) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyright",
            "--pythonpath",
            str(app.python),
            "--outputjson",
            *app_files(),
        ],
        cwd=app.folder,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(done.stdout)
    found = {
        (Path(d["file"]).name, d["range"]["start"]["line"] + 1, d.get("rule", d["message"]))
        for d in report["generalDiagnostics"]
        if d["severity"] in ("error", "warning")
    }
    assert found == expected(1), json.dumps(report["generalDiagnostics"], indent=1)
    assert report["summary"]["filesAnalyzed"] == len(app_files())
