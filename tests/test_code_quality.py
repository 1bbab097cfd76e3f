"""ruff (lint and format) and mypy stay clean: run by the test command, so CI runs them too.

mypy reads the package as pip installs it: `durable_agent.workflows` is the folder workflows/
(pyproject.toml's package-dir), which `pip install -e .` lays out as a tree of links, where
mypy checks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.package_layout import ROOT, installed_tree, out_of_date


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
    tree = installed_tree()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / ".c"),
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    checked = int(done.stdout.split(" source files")[0].rsplit(" ", 1)[-1])
    assert checked >= len(list(ROOT.glob("workflows/*.py"))) + len(list(ROOT.glob("cli/*.py")))


def test_the_installed_tree_is_the_checkouts_every_folder_mapped() -> None:
    """Where mypy runs above: the package laid out as pip installs it, of links to the checkout."""
    package = installed_tree() / "durable_agent"
    assert (package / "workflows" / "agent.py").resolve() == ROOT / "workflows" / "agent.py"
    assert (package / "activities" / "providers" / "scripted.py").is_file()
    assert (package / "serving" / "plugin.py").resolve() == ROOT / "serving" / "plugin.py"
    assert (package / "__init__.py").resolve() == ROOT / "durable_agent" / "__init__.py"
    assert (package / "py.typed").is_file() and out_of_date(installed_tree()) == []


def test_a_module_added_or_removed_since_the_install_is_named(tmp_path: Path) -> None:
    """What tests/conftest.py says before any test runs, when the tree lags the checkout."""
    copy = tmp_path / "tree"
    shutil.copytree(installed_tree(), copy, symlinks=True)
    (copy / "durable_agent" / "workflows" / "agent.py").unlink()
    (copy / "durable_agent" / "client" / "gone.py").symlink_to(tmp_path / "gone.py")
    assert out_of_date(copy) == [
        "the install lacks durable_agent/workflows/agent.py",
        "the install links durable_agent/client/gone.py, which is gone",
    ]
