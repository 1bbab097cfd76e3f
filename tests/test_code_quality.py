"""ruff (lint and format) and mypy stay clean: run by the test command, so CI runs them too.

mypy reads the package as pip installs it: `durable_agent.workflows` is the folder workflows/
(pyproject.toml's package-dir), which the editable install's import hook finds and a type checker
does not. The test lays out a tree of links as site-packages has it and checks that."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def installed_layout(under: Path) -> Path:
    """`under`/durable_agent, the package as installed, made of links to the checkout's files."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(package_dir.items()):
        target = under.joinpath(*package.split("."))
        if package == "durable_agent":
            target.mkdir(parents=True)
            for module in (ROOT / folder).glob("*.py"):
                (target / module.name).symlink_to(module)
        else:
            target.symlink_to(ROOT / folder, target_is_directory=True)
    return under / "durable_agent"


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
        assert (package / "plugin.py").resolve() == ROOT / "durable_agent" / "plugin.py"
