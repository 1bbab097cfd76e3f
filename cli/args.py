"""The command line, declared with click. A run (and `chat`) parses into one typed, frozen
`RunArgs`, its rules across options in `_run_args`; each subcommand is an async function,
declared where it runs with `@subcommand` and its options, and parses into a `Subcommand` that
calls it once connected. A bad command line is one line on stderr and exit status 2
(serving/command_line.py). Nothing here connects to a server."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, get_args

import click
from click.core import ParameterSource
from pydantic import TypeAdapter, ValidationError

from ..activities.mcp_config import MCP_CONFIG_VARIABLE, McpConfig, mcp_config_from
from ..activities.toolkits import DEMO_TOOLS
from ..client.agent_client import AgentClient
from ..demo.script import DEMO_MODEL
from ..serving import command_line
from ..serving.command_line import Argument, Command, bad_byte, parse, refuse, said_as, say
from ..workflows.bounds import MAX_STEPS, MAX_TOKENS, MAX_USD
from ..workflows.errors import AgentConfigurationError
from ..workflows.guardrail_data import GuardrailPolicy
from ..workflows.input_limits import InputTooLarge
from ..workflows.inputs import DEFAULT_TASK_QUEUE, Limits
from ..workflows.model_settings import ModelSettings, ReasoningEffort, ScriptedTurn
from ..workflows.providers import CATALOGUE, KEYED_PROVIDERS, PROVIDERS, Provider

_program: ContextVar[str] = ContextVar("program", default="starter.py")


def program() -> str:
    """The command as this process was invoked (`durable-agent`, `starter.py`), for the usage
    lines, the errors and the commands a message tells a person to paste. "starter.py" when
    the CLI is called from Python (the tests), where no command was typed."""
    return _program.get()


def invoked_as(name: str) -> None:
    """Name the command `name` in this context's messages (`program`)."""
    _program.set(name)


STDIN = "-"
"""The prompt that says: read it from standard input."""
SCRIPT = TypeAdapter(tuple[ScriptedTurn, ...])
"""--script's replies."""


@dataclass(frozen=True, kw_only=True)
class RunArgs:
    """A run to start and follow: `starter.py "PROMPT" [options]`, or `chat`."""

    command: ClassVar[str] = "run"
    prompt: str
    model: ModelSettings
    """The model's settings, checked: the provider, its model, the reasoning options, and
    streaming where the provider streams."""
    script: tuple[ScriptedTurn, ...] | None
    """The scripted provider's conversation from --script; None plays the built-in demo."""
    max_steps: int
    max_cost_usd: float | None
    plan: bool
    approve_all: bool
    allow: tuple[str, ...]
    label: str | None
    system: str | None
    tools: tuple[str, ...]
    """The modules and toolkits the embedded worker loads; () for the demo's tools."""
    offered_tools: tuple[str, ...] = ()
    """--tool: the tools the run is offered (AgentInput.tools), of those the worker at
    --address serves, in order, each once; () offers every one."""
    address: str | None
    """None: self-contained, on an embedded dev server with an in-process worker."""
    namespace: str
    task_queue: str
    no_wait: bool
    json: bool
    trace: bool
    linger: bool
    mcp_config: McpConfig | None = None
    conversation: bool = False
    code_mode: bool = False
    guardrails: GuardrailPolicy | None = None
    """--guardrail KIND=NAME, by kind (docs/guardrails.md)."""
    chat: bool = False
    """Every line typed is a turn (or steers the working one); without a prompt, the first."""
    stream: bool = False
    print_input: bool = False
    """Print the workflow input this command would start, and start nothing."""


@dataclass(frozen=True, kw_only=True)
class Following:
    """How a run (or a conversation's turn) is followed and its outcome printed."""

    ask: bool = False
    """Put the questions at this terminal (a self-contained run: nothing else can decide)."""
    json: bool
    trace: bool = False
    address: str | None
    namespace: str = "default"
    stream: bool = False
    """Print the model's text on stderr as it is written."""

    @property
    def flags(self) -> str:
        """The server's flags for a command shown to be pasted (none for a self-contained run)."""
        namespace = f" --namespace {self.namespace}" if self.namespace != "default" else ""
        return f" --address {self.address}{namespace}" if self.address else ""

    def answer(self, data: object, text: str, none: str | None = None) -> None:
        """A command's answer on stdout, at once (`watch` answers as events come): `data` as
        JSON with --json, else `text`; or `none` on stderr, when given, for no text."""
        if not self.json and not text and none is not None:
            say(none)
        else:
            print(json.dumps(data) if self.json else command_line.for_stdout(text), flush=True)


class Text(click.ParamType):
    """Text that may not be blank (`blank`: why, after "is empty"), nor longer than the run
    takes (`bound`, from workflows/input_limits.py): it would refuse it."""

    name = "text"

    def __init__(self, blank: str | None = "", bound: Callable[[str], None] | None = None):
        self.blank, self.bound = blank, bound

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if self.blank is not None and not value.strip():
            refuse(f"{said_as(param)} is empty{self.blank}")
        try:
            if self.bound is not None:
                self.bound(value)
        except InputTooLarge as refused:  # "the comment is 40,000 characters" names the flag
            refuse(str(refused).replace(refused.subject, said_as(param), 1))
        return value


POSITIVE = click.IntRange(min=1)
COUNT = click.IntRange(min=0)
# The run's own bounds (workflows/bounds.py), so that a number it would refuse is refused here,
# as a bad command line.
STEPS = click.IntRange(1, MAX_STEPS)
TOKENS = click.IntRange(1, MAX_TOKENS)
COST = click.FloatRange(0, MAX_USD, min_open=True)
FILE = click.Path(path_type=Path)
for _type, _metavar in ((POSITIVE, "n"), (COUNT, "n"), (STEPS, "n"), (TOKENS, "n")):
    _type.name = _metavar
COST.name, FILE.name = "usd", "file"
PROVIDER = click.Choice(PROVIDERS)
KEYED = "the one whose key is set (OPENAI_API_KEY first), else the scripted demo"
TTY = "at a terminal, without --json"


def flag(name: str, help: str) -> click.Option:
    return click.Option([name], is_flag=True, help=help)


def option(name: str, help: str, **attrs: Any) -> click.Option:
    return click.Option([name], help=help, show_envvar="envvar" in attrs, **attrs)


def argument(name: str, said_as: str, **attrs: Any) -> Callable[[Any], Any]:
    """A positional argument as a decorator, named in messages by what it is."""
    return click.argument(name, cls=Argument, said_as=said_as, **attrs)


def read_json(flag: str, path: Path, adapter: TypeAdapter[Any], *, turns: bool = False) -> Any:
    """The file `flag` names, as `adapter`'s type; refused, with the first problem and where it
    is, when it cannot be read or is not valid. `turns`: a script, whose replies are named as
    providers.md names them (reply N is played at step N)."""
    try:
        return adapter.validate_json(path.read_bytes())
    except OSError as error:
        refuse(f"{flag} {path}: {error.strerror or error}")
    except ValidationError as error:
        first = error.errors()[0]
        loc = first["loc"]
        where = ".".join(str(part) for part in loc[1 if turns else 0 :])
        if turns and loc:
            where = f"reply {int(loc[0]) + 1}" + (f", {where}" if where else "")
        refuse(f"{flag} {path}: {where + ': ' if where else ''}{first['msg']}")


_RUN_OPTIONS = [
    option("--prompt-file", "read the prompt from FILE (UTF-8 text, of any length)", type=FILE),
    option("--provider", "the model's provider", type=PROVIDER, show_default=KEYED),
    option("--model", "the model's name", show_default="the provider's; the scripted demo's own"),
    option("--script", "scripted provider: play this JSON list of ScriptedTurn", type=FILE),
    option("--thinking-budget", "anthropic: think for up to N tokens (>= 1024)", type=TOKENS),
    option(
        "--reasoning-effort", "how hard it thinks", type=click.Choice(get_args(ReasoningEffort))
    ),
    option("--max-steps", "fail the run after N steps", type=STEPS, default=Limits().max_steps),
    option("--max-cost-usd", "fail the run once it has cost more", type=COST),
    flag("--plan", "plan mode: a person approves the model's plan first"),
    flag("--code-mode", "offer run_code: one script over the tools (docs/code-mode.md)"),
    option("--guardrail", "input, output or tool_result=NAME", multiple=True, metavar="KIND=NAME"),
    flag("--approve-all", "a trusted job: no tool call waits for a person"),
    option("--allow", "this tool's calls run without asking", multiple=True, metavar="TOOL"),
    option("--label", "the kind of task, for `stats` (e.g. order-status)", type=Text()),
    option(
        "--system",
        "the system prompt",
        type=Text(),
        show_default="the demo's in a demo run (docs/cli.md), else none",
    ),
    option(
        "--tools", "the embedded worker's, as `worker --tools`", multiple=True, metavar="MODULE"
    ),
    click.Option(
        ["--tool", "offered_tools"],
        help="with --address: offer the run this tool of the worker's (default: every one)",
        multiple=True,
        metavar="NAME",
        type=Text(),
    ),
    option("--address", "Temporal frontend (none: self-contained)", envvar="TEMPORAL_ADDRESS"),
    option("--namespace", "the server's namespace", default="default"),
    option("--task-queue", "the workers' task queue", default=DEFAULT_TASK_QUEUE),
    flag("--no-wait", "print the workflow id and return"),
    flag("--json", "print one JSON object on stdout"),
    flag("--print-input", "print the workflow input this would start, as JSON; start nothing"),
    # No default: unset, a run streams where stderr is a terminal (`_run_args`).
    option(
        "--stream/--no-stream", "print the model's text as it comes", default=None, show_default=TTY
    ),
    flag("--trace", "once the run has ended, print its steps as a table on stderr"),
    flag("--linger", "self-contained: keep the server and its Web UI up after the run"),
    option("--mcp-config", "self-contained: MCP servers for the run", envvar=MCP_CONFIG_VARIABLE),
]


def _run_args(chat: bool, **params: Any) -> RunArgs:
    """The run's rules across its options, and what it is given when they say nothing."""
    address, no_wait, tools = params["address"], params["no_wait"], params["tools"]
    if params["prompt"] == STDIN and params["plan"] and address is None:
        refuse(
            f"--plan asks at this terminal, on standard input, which `{STDIN}` takes for the "
            "prompt: give the prompt with --prompt-file FILE"
        )
    prompt = _prompt(params.pop("prompt"), params.pop("prompt_file"), chat=chat)
    if not prompt.strip() and not chat:
        refuse("the prompt is empty")
    if params["linger"] and address is not None:
        refuse("--linger is for self-contained runs; with --address the server is yours")
    mcp_config, source = params.pop("mcp_config"), click.get_current_context().get_parameter_source
    if mcp_config and address is not None and source("mcp_config") == ParameterSource.COMMANDLINE:
        refuse("--mcp-config is for self-contained runs; with --address, give it to the worker")
    try:
        mcp = mcp_config_from(mcp_config) if address is None else None
    except AgentConfigurationError as error:
        refuse(error.message)
    if chat and (no_wait or params["json"]):
        refuse(
            "chat is at this terminal; to start a conversation and return, use "
            '"PROMPT" --conversation --address ... --no-wait'
        )
    if no_wait and address is None:
        refuse(
            "--no-wait needs --address (or TEMPORAL_ADDRESS): a self-contained run stops its "
            "server when it returns"
        )
    if no_wait and params["trace"]:
        refuse(
            "--trace prints the steps once the run has ended; with --no-wait, use "
            f"`{program()} trace WORKFLOW_ID` later"
        )
    if tools and address is not None:
        refuse("--tools is for the embedded worker; with --address, start the worker with --tools")
    offered = params["offered_tools"] = tuple(dict.fromkeys(params["offered_tools"]))
    if offered and address is None and not params["print_input"]:
        refuse(
            "--tool chooses among the tools of the worker at --address; self-contained, --tools "
            "MODULE chooses what the embedded worker serves"
        )
    keyed = (p for p, variable in KEYED_PROVIDERS.items() if os.environ.get(variable))
    provider: Provider = params.pop("provider") or next(keyed, None) or "scripted"
    script = params.pop("script")
    if script is not None and provider != "scripted":
        refuse("--script is for the scripted provider")
    script = None if script is None else read_json("--script", script, SCRIPT, turns=True)
    demo = provider == "scripted" and script is None
    if demo and tools and not {"demo", DEMO_TOOLS} & {*tools}:
        refuse(
            "the scripted demo calls the demo's tools: with --tools, give --script or a real "
            "provider (or add --tools demo)"
        )
    if demo and offered:
        refuse(
            "the scripted demo calls the demo's tools: with --tool, give --script or a real "
            "provider"
        )
    guardrails = _guardrails(params.pop("guardrail"))
    name = params.pop("model") or (DEMO_MODEL if demo else CATALOGUE[provider].default_model)
    stream = params.pop("stream")
    stream = sys.stderr.isatty() and not params["json"] if stream is None else stream
    try:  # the settings' own checks, as one line, before anything starts
        model = ModelSettings(
            provider=provider,
            model=name,
            thinking_budget_tokens=params.pop("thinking_budget"),
            reasoning_effort=params.pop("reasoning_effort"),
            stream=stream and CATALOGUE[provider].streams,
        )
    except ValidationError as error:
        message = str(error.errors()[0]["msg"]).removeprefix("Value error, ")
        message = message.replace("thinking_budget_tokens", "--thinking-budget")
        refuse(message.replace("reasoning_effort", "--reasoning-effort"))
    return RunArgs(
        prompt=prompt,
        model=model,
        script=script,
        mcp_config=mcp,
        guardrails=guardrails,
        conversation=params.pop("conversation", False) or chat,
        chat=chat,
        stream=stream,
        **params,
    )


def _guardrails(given: tuple[str, ...]) -> GuardrailPolicy | None:
    """--guardrail KIND=NAME, each once, in order; None for none."""
    kinds: dict[str, list[str]] = {"input": [], "output": [], "tool_results": []}
    for text in dict.fromkeys(given):
        kind, _, name = text.partition("=")
        field = "tool_results" if kind == "tool_result" else kind
        if field not in kinds or not name:
            refuse(f"--guardrail {text}: give KIND=NAME, KIND one of input, output, tool_result")
        kinds[field].append(name)
    try:
        return GuardrailPolicy.model_validate(kinds) if given else None
    except ValidationError as error:
        refuse(f"--guardrail: {error.errors()[0]['msg']}")


def _prompt(given: str | None, path: Path | None, *, chat: bool) -> str:
    """The prompt: the argument, standard input for `-`, or --prompt-file's text."""
    if given is not None and path is not None:
        refuse("give the prompt or --prompt-file FILE, not both")
    if path is not None:
        try:
            return _utf8(f"--prompt-file {path}", path.read_bytes())
        except OSError as error:
            refuse(f"--prompt-file {path}: {error.strerror or error}")
    if given == STDIN:
        if chat:
            refuse(
                "chat reads its messages from standard input: give the first one as an "
                "argument or with --prompt-file FILE"
            )
        if sys.stdin is None:
            refuse(f"`{STDIN}`: there is no standard input to read the prompt from")
        if sys.stdin.isatty():
            say("reading the prompt from standard input: end it with Ctrl-D")
        return _utf8("standard input", sys.stdin.buffer.read())
    if given is None and not chat:
        refuse(
            f"the prompt is missing: give it as an argument, `{STDIN}` to read it from standard "
            "input, or --prompt-file FILE"
        )
    return given or ""


def _utf8(source: str, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # a byte order mark, as some editors write, is dropped
    except UnicodeDecodeError as error:
        refuse(f"{source} is not UTF-8 text: {bad_byte(error)}")


_PROMPT = Argument(["prompt"], "the prompt", required=False)
RUN = Command(
    "run",
    params=[_PROMPT, flag("--conversation", "then wait for the next message"), *_RUN_OPTIONS],
    callback=partial(_run_args, False),
    help=f"Start an agent run: PROMPT is what it should do (`{STDIN}`: read from standard input). "
    "docs/cli.md has the rest.",
)
CHAT = Command(
    "chat",
    params=[_PROMPT, *_RUN_OPTIONS],
    callback=partial(_run_args, True),
    help="A conversation at the terminal, PROMPT its first message: each line is a turn; a line "
    "typed while a turn works steers it; Ctrl-C interrupts the turn, a second Ctrl-C (or /end, "
    "or the end of stdin) ends the conversation.",
)


def parse_run(argv: Sequence[str], *, chat: bool = False) -> RunArgs:
    return parse(CHAT if chat else RUN, argv, f"{program()} chat" if chat else program())


@dataclass(frozen=True)
class Subcommand:
    """A subcommand, parsed: its function, to call with the run it names (or the client) and
    its options once connected to `following.address`."""

    command: str
    workflow_id: str | None
    following: Following
    function: Callable[..., Awaitable[int]]
    options: dict[str, Any]
    of_run: bool

    async def __call__(self, client: AgentClient) -> int:
        of = client.run(self.workflow_id) if self.of_run and self.workflow_id else client
        return await self.function(of, self.following, **self.options)


def subcommand(
    *, of_run: bool = True, rules: Callable[[dict[str, Any]], None] | None = None
) -> Callable[[Callable[..., Awaitable[int]]], Command]:
    """An async function `f(run_or_client, following, **options)` as the subcommand of its
    name, its docstring the help (as click has it: up to a form feed), with the options declared
    on it: about the run WORKFLOW_ID (`of_run`, called with it), else called with the client.
    Every subcommand needs an address; `rules` checks the others across options."""

    def declare(function: Callable[..., Awaitable[int]]) -> Command:
        name = function.__name__.strip("_").replace("_", "-")

        def parsed(address: str | None, namespace: str, json: bool, **options: Any) -> Any:
            if address is None:
                refuse(
                    f"{name} needs --address (or TEMPORAL_ADDRESS): the runs live on a "
                    "Temporal server"
                )
            if rules is not None:
                rules(options)
            following = Following(json=json, address=address, namespace=namespace)
            workflow_id = options.pop("workflow_id") if of_run else options.get("workflow_id")
            return Subcommand(name, workflow_id, following, function, options, of_run)

        params = [
            *([Argument(["workflow_id"], "the workflow id", type=Text())] if of_run else []),
            *reversed(getattr(function, "__click_params__", [])),
            option("--address", "Temporal frontend (one is needed)", envvar="TEMPORAL_ADDRESS"),
            option("--namespace", "the server's namespace", default="default"),
            flag("--json", "print JSON on stdout"),
        ]
        return Command(name, params=params, callback=parsed, help=function.__doc__)

    return declare
