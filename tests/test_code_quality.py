"""ruff (lint and format) and mypy stay clean: run by the test command, so CI runs them too.

mypy reads the package as pip installs it: `durable_agent.workflows` is the folder workflows/
(pyproject.toml's package-dir), which the editable install's import hook finds and a type checker
does not. The test lays out a tree of links as site-packages has it and checks that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.package_layout import ROOT, installed_layout


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
    ],
    ids=["ruff-check", "ruff-format"],
)
def test_clean(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean_on_the_installed_package(tmp_path: Path) -> None:
    installed_layout(tmp_path)
    config = str(ROOT / "pyproject.toml")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            config,
            "--cache-dir",
            str(tmp_path / ".c"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    checked = int(done.stdout.split(" source files")[0].rsplit(" ", 1)[-1])
    assert checked >= len(list(ROOT.glob("workflows/*.py"))) + len(list(ROOT.glob("cli/*.py")))


def test_the_layout_helper_maps_every_folder() -> None:
    """The helper above: a package of links with the rooms inside, as pip installs them."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        package = installed_layout(Path(scratch))
        assert (package / "workflows" / "agent.py").resolve() == ROOT / "workflows" / "agent.py"
        assert (package / "activities" / "providers" / "scripted.py").is_file()
        assert (package / "serving" / "plugin.py").resolve() == ROOT / "serving" / "plugin.py"
        assert (package / "__init__.py").resolve() == ROOT / "durable_agent" / "__init__.py"
