"""The checkout's folders and the package they install as, read from the one place that says it:
pyproject.toml's package-dir (workflows/ is `durable_agent.workflows`, and so on)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PACKAGE_DIRS: dict[str, str] = SETUPTOOLS["package-dir"]
"""Each subpackage's folder, by its import name."""


def project_modules() -> dict[str, Path]:
    """Every module of the installed package, by its import name."""
    modules = {}
    for package, folder in PACKAGE_DIRS.items():
        paths = (ROOT / folder).glob("*.py") if package == "durable_agent" else None
        for path in paths or (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
            modules[name] = path
    return modules


def installed_layout(under: Path) -> Path:
    """`under`/durable_agent, the package as installed, made of links to the checkout's files (a
    type checker does not know the editable install's import hook)."""
    for package, folder in sorted(PACKAGE_DIRS.items()):
        target = under.joinpath(*package.split("."))
        if package == "durable_agent":
            target.mkdir(parents=True)
            for module in (*(ROOT / folder).glob("*.py"), *(ROOT / folder).glob("*.pyi")):
                (target / module.name).symlink_to(module)
        else:
            target.symlink_to(ROOT / folder, target_is_directory=True)
    return under / "durable_agent"
