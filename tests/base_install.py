"""Run Python as a plain `pip install -e .` would, inside the test venv: every installed package
outside the base dependencies is hidden, so importing it raises ModuleNotFoundError.

    python tests/base_install.py MODULE_OR_SCRIPT [ARGS...]

The base dependencies are read from this project's installed metadata: `Requires-Dist` without
extras, followed through each dependency's own requirements (with the extras the project asks of
it, such as temporalio[pydantic]). Nothing is listed by hand, so a new dependency in
pyproject.toml, or a new extra, cannot make the guard stale. A file is hidden when it belongs to an
installed distribution outside that closure; the standard library and this project's own modules
are never hidden. Namespace packages (opentelemetry) are split by file, so opentelemetry.trace
(the API, a base dependency) imports and opentelemetry.sdk (the `otel` extra) does not.

TARGET is a script path (run as __main__), or `-c CODE`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import runpy
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from types import ModuleType

PROJECT = "durable-agent-loop"


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def base_distributions(project: str = PROJECT) -> set[str]:
    """The canonical names of the project's base dependencies, transitively, with their extras."""
    from packaging.requirements import Requirement  # pytest's own dependency; parent side only

    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(project, frozenset())]
    while todo:
        name, extras = todo.pop()
        if (key := (_canonical(name), extras)) in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement whose marker matched but is not installed: nothing to hide
        names.add(_canonical(dist.metadata["Name"]))
        environments = [{"extra": extra} for extra in (*extras, "")]
        for line in dist.requires or []:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate(env) for env in environments):
                todo.append((requirement.name, frozenset(requirement.extras)))
    return names


def hidden_files(allowed: Iterable[str]) -> set[str]:
    """Every installed file of a distribution outside `allowed`."""
    allowed = set(allowed)
    files: set[str] = set()
    for dist in metadata.distributions():
        if _canonical(dist.metadata["Name"]) in allowed:
            continue
        for file in dist.files or []:
            if file.suffix in (".py", ".so", ".pyd", ".pyc"):
                files.add(os.path.realpath(dist.locate_file(file)))
    return files


class HideOptionalPackages(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: finds a module as the path finder would, and refuses it when its
    file belongs to a hidden distribution."""

    def __init__(self, hidden: set[str]) -> None:
        self._hidden = hidden
        self.refused: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        origin = spec.origin if spec is not None else None
        if origin and os.path.realpath(origin) in self._hidden:
            self.refused.append(fullname)
            raise ModuleNotFoundError(
                f"No module named {fullname!r} (hidden: not a base dependency)", name=fullname
            )
        return None  # let the usual finders load it


def install(allowed: Iterable[str]) -> HideOptionalPackages:
    finder = HideOptionalPackages(hidden_files(allowed))
    for name in [n for n in sys.modules if n not in sys.builtin_module_names]:
        module = sys.modules[name]
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if origin and os.path.realpath(origin) in finder._hidden:
            del sys.modules[name]  # imported before the finder (by a .pth file, say)
    sys.meta_path.insert(0, finder)
    return finder


def main() -> None:
    allowed = os.environ["BASE_DISTRIBUTIONS"].split(",")
    install(allowed)
    target, *args = sys.argv[1:]
    if target == "-c":
        sys.argv = ["-c", *args[1:]]
        sys.path[0] = os.getcwd()
        exec(compile(args[0], "<base_install>", "exec"), {"__name__": "__main__"})
        return
    sys.argv = [target, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(target))
    runpy.run_path(target, run_name="__main__")


if __name__ == "__main__":
    main()
