"""The checkout's folders and the package they install as, read from the one place that says it:
pyproject.toml's package-dir (workflows/ is `durable_agent.workflows`, and so on)."""

from __future__ import annotations

import sys
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


def installed_files() -> list[str]:
    """The checkout's code as the install lays it out, by path inside the installed tree: every
    module of the package, the face's stub and its type marker."""
    files = ["durable_agent/__init__.pyi", "durable_agent/py.typed"]
    for name, path in project_modules().items():
        parts = name.split(".")
        files.append("/".join(parts) + ("/__init__.py" if path.name == "__init__.py" else ".py"))
    return sorted(files)


def installed_tree() -> Path:
    """The folder on sys.path where `pip install -e .` laid the package out: durable_agent/ as
    site-packages has it, each file a link to the checkout's (pyproject.toml,
    [tool.distutils.editable_wheel]). Type checkers read the package there."""
    face = ROOT / "durable_agent" / "__init__.py"
    for entry in sys.path:
        installed = Path(entry or ".") / "durable_agent"
        if (installed / "workflows").is_dir() and (installed / "__init__.py").resolve() == face:
            return installed.parent
    raise LookupError(
        "this checkout is not installed as a tree of links (an older install maps its folders by "
        "an import hook, which type checkers do not follow)"
    )


def out_of_date(tree: Path) -> list[str]:
    """What the installed tree lacks of the checkout's code, and its links to files now gone: a
    module added, renamed or removed since `pip install -e .`; empty when it is current."""
    lacking = [
        f"the install lacks {file}" for file in installed_files() if not (tree / file).is_file()
    ]
    gone = sorted(
        f"the install links {link.relative_to(tree)}, which is gone"
        for link in (tree / "durable_agent").rglob("*")
        if link.is_symlink() and not link.exists()
    )
    return lacking + gone
