"""Tools from elsewhere: the modules a worker is told to load, and toolkits registered whole.

`load_tools(["myapp.tools", "retail:make_toolkit"])` is what `worker.py --tools` and the CLI's
`--tools` do: import each module, whose `@tool`s and `register_toolkit` calls register tools,
and for `MODULE:ATTR` register the toolkit that ATTR names, or the one it returns when it is a
function or a class (called with no arguments, as `uvicorn app:main --factory` would).

`register_toolkit(obj, side_effects={"cancel_order"})` registers an object's public methods, or
those listed, as tools bound to that instance, with per-method options as `@tool` takes them:
a toolkit written for another framework or a benchmark needs no rewriting.

A process that never calls `load_tools` serves the demo's tools, as it always did
(`load_default_tools`, called by `worker.build_worker`); one that does serves what it loaded.
"""

from __future__ import annotations

import importlib
import inspect
import operator
import os
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .tools import DEFAULT_TOOLS, ToolRegistry, make_tool, modules_loading

DEMO_TOOLS = "durable_agent.demo.tools"
"""The module of the demo's tools; `--tools demo` names it too."""
TOOLS_VARIABLE = "AGENT_TOOLS"
"""The worker's tool modules, comma-separated, when it is given no --tools."""
_ALIASES = {"demo": DEMO_TOOLS}

_chosen = False
"""Whether this process chose its tools with `load_tools`."""


class ToolLoadError(Exception):
    """A tool module or toolkit that cannot be loaded; the message is one line."""


@dataclass(frozen=True)
class Toolkit:
    """An object's methods (or a list of functions) to register as tools, with their options:
    what `register_toolkit` takes, as a value a `MODULE:ATTR` factory can return."""

    target: Any
    """An object whose public methods are tools, or a list of functions and bound methods."""
    methods: Collection[str] | None = None
    """The methods to register (default: the object's `__tools__` if it has one, else every
    public method)."""
    side_effects: Collection[str] = ()
    """The methods that change data (`@tool(side_effects=True)`)."""
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per method, more `@tool` options (`{"cancel_order": {"compensation": undo_cancel}}`)."""
    name_prefix: str = ""
    """Put before every tool's name (`"retail_"`), so that two toolkits' `search` can coexist."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """`@tool` options for every method (`timeout_seconds`, `retry`, ...)."""

    def functions(self) -> dict[str, Callable[..., Any]]:
        """The callables to register, by method (or function) name, in a stable order."""
        target = self.target
        if isinstance(target, list | tuple):
            found = {_name_of(fn): fn for fn in target}
            if len(found) != len(target):
                raise ValueError("a toolkit's functions must have different names")
        else:
            names = self.methods
            if names is None:
                names = getattr(target, "__tools__", None) or public_methods(target)
            found = {}
            for name in names:
                member = getattr(target, name, None)
                if not callable(member):
                    raise ValueError(f"{type(target).__name__} has no method {name!r}")
                found[name] = member
        wanted = set(self.methods) if self.methods is not None else set(found)
        unknown = sorted(
            (set(self.side_effects) | set(self.options) | wanted) - set(found),
        )
        if unknown:
            raise ValueError(f"the toolkit has no method {', '.join(map(repr, unknown))}")
        return {name: fn for name, fn in found.items() if name in wanted}

    def register(self, into: ToolRegistry = DEFAULT_TOOLS) -> list[str]:
        """Register every method as a tool, `into` the default registry or another; returns
        their tool names. Checks every name first, so that a collision registers none."""
        functions = self.functions()
        planned = {
            name: {
                **self.defaults,
                "side_effects": name in self.side_effects,
                **self.options.get(name, {}),
            }
            for name in functions
        }
        names = {m: o.get("name") or self.name_prefix + m for m, o in planned.items()}
        registered = into.tools()
        for method, tool_name in names.items():
            known = registered.get(tool_name)
            if known is not None and known.function != functions[method]:
                raise ValueError(
                    f"a tool named {tool_name!r} is already registered: give this toolkit a "
                    "name_prefix, or the method a name in options"
                )
        for method, fn in functions.items():
            into.add(make_tool(fn, **{**planned[method], "name": names[method]}))
        return list(names.values())


def register_toolkit(
    target: Any,
    methods: Collection[str] | None = None,
    *,
    side_effects: Collection[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    name_prefix: str = "",
    **defaults: Any,
) -> list[str]:
    """Register an object's public methods (or `methods`) as tools bound to that instance, or
    each function of a list; returns the tool names. `side_effects` names the methods that
    change data; `options` gives a method more `@tool` options; `name_prefix` goes before every
    name; any other keyword is a `@tool` option for every method (`timeout_seconds=10`)."""
    return Toolkit(
        target,
        methods=methods,
        side_effects=side_effects,
        options=options or {},
        name_prefix=name_prefix,
        defaults=defaults,
    ).register()


def public_methods(target: Any) -> list[str]:
    """The methods a class defines (and inherits) whose names do not start with `_`, without
    evaluating properties, and without what every object or pydantic model has. Static methods
    count; class methods do not (they are mostly other constructors: `from_config`)."""
    skipped = _skipped_members()
    names = []
    for cls in type(target).__mro__:
        if cls is object:
            continue
        for name, member in vars(cls).items():
            if name.startswith("_") or name in names or name in skipped:
                continue
            if isinstance(member, staticmethod) or inspect.isfunction(member):
                names.append(name)
    return sorted(names)


def _skipped_members() -> set[str]:
    from pydantic import BaseModel

    return {name for name in dir(BaseModel) if not name.startswith("_")}


def _name_of(fn: Any) -> str:
    name = getattr(fn, "__name__", None)
    if not callable(fn) or not isinstance(name, str):
        raise ValueError(f"a toolkit's list holds {fn!r}, which is not a function")
    return name


def tools_from_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """AGENT_TOOLS, split on commas; [] when it is unset or empty."""
    value = (os.environ if environ is None else environ).get(TOOLS_VARIABLE, "")
    return [name.strip() for name in value.split(",") if name.strip()]


def load_tools(names: Iterable[str], into: ToolRegistry | None = None) -> list[str]:
    """Import each `MODULE` and register each `MODULE:ATTR` toolkit. Into the default registry
    (None), from which this process then serves only what it loaded (and the built-in tools);
    or `into` a registry of one's own (AgentPlugin(tools=...)), which gets exactly the tools
    each module made and each toolkit. Returns the names of every tool served. Raises
    ToolLoadError (one line) for the first that cannot be loaded."""
    global _chosen
    if into is None:
        _chosen = True
    # As uvicorn does: a module beside where the worker was started is found, also from an
    # installed console script, whose sys.path starts with its own directory.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        _load(name, into)
    return sorted((into or DEFAULT_TOOLS).tools())


def serves_demo(registry: ToolRegistry | None = None) -> bool:
    """Whether `registry` (default: the process's) serves the demo's tools, whose database a
    worker then checks it can write (and so creates): only then."""
    return bool((registry or DEFAULT_TOOLS).from_module(DEMO_TOOLS))


def load_default_tools() -> None:
    """The demo's tools, unless this process chose its tools with `load_tools`."""
    if not _chosen:
        importlib.import_module(DEMO_TOOLS)


def _load(name: str, into: ToolRegistry | None) -> None:
    module_name, colon, attribute = _ALIASES.get(name, name).partition(":")
    if not module_name or (colon and not attribute):
        raise ToolLoadError(f"--tools {name!r}: expected MODULE or MODULE:ATTR")
    modules_loading.append(module_name)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise ToolLoadError(
            f"--tools {name}: cannot import {module_name}: {_one_line(error)}"
        ) from None
    finally:
        modules_loading.pop()
    if not attribute:
        if into is not None:
            for registered in DEFAULT_TOOLS.from_module(module_name):
                into.add(registered)
        return
    try:
        found = operator.attrgetter(attribute)(module)
    except AttributeError:
        raise ToolLoadError(f"--tools {name}: {module_name} has no {attribute!r}") from None
    try:
        _register(found, attribute, into or DEFAULT_TOOLS)
    except ToolLoadError as error:
        raise ToolLoadError(f"--tools {name}: {error}") from None
    except Exception as error:
        raise ToolLoadError(f"--tools {name}: {_one_line(error)}") from None


def _register(found: Any, attribute: str, into: ToolRegistry) -> None:
    made = [r for r in DEFAULT_TOOLS.tools().values() if r.function == found]
    if made:  # a @tool function: importing its module registered it
        into.add(made[0])
        return
    if inspect.isclass(found) or inspect.isfunction(found):
        required = [
            p
            for p in inspect.signature(found).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if required:
            raise ToolLoadError(
                f"{attribute} needs arguments ({', '.join(p.name for p in required)}): name a "
                "toolkit, or a function or class that makes one with none"
            )
        try:
            found = found()
        except Exception as error:
            raise ToolLoadError(f"{attribute}() failed: {_one_line(error)}") from None
    if isinstance(found, Toolkit):
        found.register(into)
    else:
        Toolkit(found).register(into)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


__all__ = [
    "DEMO_TOOLS",
    "TOOLS_VARIABLE",
    "ToolLoadError",
    "Toolkit",
    "load_default_tools",
    "load_tools",
    "public_methods",
    "register_toolkit",
    "serves_demo",
    "tools_from_env",
]
