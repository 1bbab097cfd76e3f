"""Tools from elsewhere: `worker.py --tools` and the CLI's `--tools` in a subprocess, against the
session's dev server and, for the CLI, the real openai SDK over tests/fake_openai.py; and
toolkits registered with one call (in this process, under prefixes no other test uses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field
from temporalio.client import Client

from durable_agent.activities import store_check
from durable_agent.activities.toolkits import register_toolkit
from durable_agent.activities.tools import describe, registered_tools, tool, tool_specs
from durable_agent.demo import tools as demo_tools
from durable_agent.workflows.agent import AgentWorkflow
from durable_agent.workflows.inputs import AgentInput
from durable_agent.workflows.model_settings import ModelSettings
from tests.fake_openai import FakeOpenAI, Reply
from tests.helpers import TRUSTED, call, run_agent, scripted_input, turn
from tests.retail_toolkit import MathTools, RetailTools

REPO = Path(__file__).resolve().parent.parent
RETAIL = "tests.retail_toolkit:make_toolkit"
RETAIL_TOOLS = [
    "calculate",
    "cancel_pending_order",
    "currency",
    "find_user_id_by_email",
    "get_user_details",
    "list_orders",
]
HIDDEN = ("TEMPORAL_ADDRESS", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENT_TOOLS")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in HIDDEN}
    return {**env, **extra}


def worker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "worker.py", *args],
        cwd=REPO,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("argv", "env", "says"),
    [
        (["--tools", "no_such_module"], {}, "cannot import no_such_module: ModuleNotFoundError"),
        (["--tools", "tests.retail_toolkit:nothing"], {}, "has no 'nothing'"),
        (["--tools", "json:loads"], {}, "loads needs arguments (s)"),
        (["--tools", "json:"], {}, "expected MODULE or MODULE:ATTR"),
        ([], {"AGENT_TOOLS": "demo, no_such_module"}, "cannot import no_such_module"),
    ],
)
def test_a_module_that_cannot_be_loaded_stops_the_worker_in_one_line(
    argv: list[str], env: dict[str, str], says: str
) -> None:
    # An address where nothing listens: the worker must stop before it tries to connect.
    done = worker(*argv, "--address", "127.0.0.1:1", env=clean_env(**env))

    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("worker.py: error: --tools "), lines
    assert says in lines[0]


@pytest.fixture
def retail_worker(client: Client, task_queue: str) -> Iterator[subprocess.Popen[str]]:
    """`worker.py --tools tests.retail_toolkit:make_toolkit` serving the test's task queue."""
    process = subprocess.Popen(
        [
            sys.executable,
            "worker.py",
            "--address",
            client.service_client.config.target_host,
            "--task-queue",
            task_queue,
            "--tools",
            RETAIL,
        ],
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        # SIGTERM, as docker stop sends: SIGINT may be ignored by a test run in the background.
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr
        served = sorted([*RETAIL_TOOLS, "read_result"])
        assert f"serving 7 tools: {', '.join(served)}" in stderr


async def test_a_worker_given_tools_serves_those_and_not_the_demo(
    client: Client, task_queue: str, retail_worker: subprocess.Popen[str]
) -> None:
    script = [
        turn(
            call("search_orders", email="ada@b.com"),
            call("find_user_id_by_email", email="nobody@b.com"),
            call("find_user_id_by_email", email="ada@b.com"),
        ),
        turn(text="done"),
    ]
    handle = await client.start_workflow(
        AgentWorkflow.run,
        scripted_input(script),  # tools=None: everything the worker serves
        id=f"toolkit-{uuid.uuid4()}",
        task_queue=task_queue,
    )
    result = await handle.result()
    transcript = await handle.query(AgentWorkflow.transcript)

    assert result.answer == "done"
    results = {m.tool_call_id: m.content for m in transcript if m.role == "tool"}
    assert results["call_1_1"] == (
        "Error: no tool named 'search_orders'. Available tools: "
        + ", ".join(RETAIL_TOOLS)
        + ", finish."
    )
    assert results["call_1_2"] == (
        "Error: find_user_id_by_email failed: ValueError: User not found. "
        "Check the arguments and try again."
    )
    assert results["call_1_3"] == "u1"


def test_the_cli_runs_a_toolkit_with_its_own_system_prompt(tmp_path: Path) -> None:
    """`starter.py --tools ... --system ...`, self-contained, through the real openai SDK: the
    provider gets the toolkit's tools and not the demo's, and the system prompt given."""
    script = [
        Reply(tool_calls=[("c1", "find_user_id_by_email", json.dumps({"email": "ada@b.com"}))]),
        Reply(tool_calls=[("c2", "list_orders", json.dumps({"user_id": "u1"}))]),
        Reply("Your pending order is #W1."),
    ]
    with FakeOpenAI(script) as fake:
        env = clean_env(OPENAI_API_KEY=fake.api_key, OPENAI_BASE_URL=fake.base_url)
        done = subprocess.run(
            [
                sys.executable,
                "starter.py",
                "Which of my orders is pending? I am ada@b.com.",
                "--provider",
                "openai",
                "--model",
                "gpt-fake-mini",
                "--tools",
                RETAIL,
                "--system",
                "You are the retail desk.",
                "--json",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        requests = [r.body for r in fake.requests]

    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["status"] == "completed" and out["answer"] == "Your pending order is #W1."
    first = requests[0]
    assert first["messages"][0] == {"role": "system", "content": "You are the retail desk."}
    assert sorted(t["function"]["name"] for t in first["tools"]) == sorted(
        [*RETAIL_TOOLS, "finish"]
    )
    orders = json.loads(requests[2]["messages"][-1]["content"])
    assert [o["order_id"] for o in orders] == ["#W2", "#W1"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--tools", RETAIL], "the scripted demo calls the demo's tools"),
        (["--tools", RETAIL, "--address", "127.0.0.1:1"], "--tools is for the embedded worker"),
        (["--system", " "], "--system is empty"),
    ],
)
def test_the_cli_refuses_tools_it_cannot_use_in_one_line(argv: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, "starter.py", "hi", *argv],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr


def test_the_cli_reports_a_module_it_cannot_import_in_one_line(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text("[]")
    done = subprocess.run(
        [sys.executable, "starter.py", "hi", "--tools", "no_such_module", "--script", str(script)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "starter.py: error: --tools no_such_module: cannot import no_such_module: "
        "ModuleNotFoundError: No module named 'no_such_module'"
    ]


def test_the_worker_checks_the_demo_database_where_the_demo_keeps_it() -> None:
    """store_check does not import the demo's tools (that would register them)."""
    assert (store_check.DB_PATH_ENV, store_check.DEFAULT_DB_PATH) == (
        demo_tools.DB_PATH_ENV,
        demo_tools.DEFAULT_DB_PATH,
    )


def test_register_toolkit_registers_the_public_methods_bound_to_the_instance() -> None:
    shop = RetailTools()
    names = register_toolkit(
        shop,
        side_effects={"cancel_pending_order"},
        options={"calculate": {"timeout_seconds": 5.0, "name": "tk1_calc"}},
        name_prefix="tk1_",
        max_result_chars=4_000,
    )

    assert names == [
        "tk1_calc",
        "tk1_cancel_pending_order",
        "tk1_currency",
        "tk1_find_user_id_by_email",
        "tk1_get_user_details",
        "tk1_list_orders",
    ]  # not the property `busy` (never evaluated), `_audit`, nor the classmethod `from_config`
    specs = {s.name: s for s in tool_specs(names)}
    assert [n for n, s in specs.items() if s.side_effects] == ["tk1_cancel_pending_order"]
    assert specs["tk1_calc"].timeout_seconds == 5.0
    assert {s.max_result_chars for s in specs.values()} == {4_000}
    registered = registered_tools()["tk1_find_user_id_by_email"].function
    assert registered == shop.find_user_id_by_email  # bound to this instance
    registered("ada@b.com")
    assert shop.calls == 1


def test_two_toolkits_with_one_name_need_a_prefix() -> None:
    register_toolkit(MathTools(), name_prefix="tk2_")
    with pytest.raises(ValueError, match="'tk2_calculate' is already registered: give"):
        register_toolkit(
            RetailTools(), methods=["find_user_id_by_email", "calculate"], name_prefix="tk2_"
        )
    # The check comes first: the collision registered neither method.
    assert "tk2_find_user_id_by_email" not in registered_tools()
    assert register_toolkit(RetailTools(), methods=["calculate"], name_prefix="tk2_retail_") == [
        "tk2_retail_calculate"
    ]


def test_a_list_of_functions_is_a_toolkit_and_mistakes_are_named() -> None:
    math = MathTools()
    assert register_toolkit([math.calculate], name_prefix="tk3_") == ["tk3_calculate"]
    with pytest.raises(ValueError, match="no method 'refund'"):
        register_toolkit(RetailTools(), side_effects={"refund"}, name_prefix="tk4_")
    with pytest.raises(ValueError, match="the providers take 1 to 64 letters"):
        register_toolkit(MathTools(), name_prefix="tk5.")


SHOP = RetailTools()
_shop_tools: list[str] = []


def shop_tools() -> list[str]:
    """SHOP registered once per session, under the prefix `shop_`."""
    if not _shop_tools:
        _shop_tools.extend(
            register_toolkit(SHOP, side_effects={"cancel_pending_order"}, name_prefix="shop_")
        )
    return _shop_tools


async def test_a_toolkits_docstrings_reach_the_provider_and_its_errors_the_model(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retail toolkit registered with one call, run through the real openai SDK: the
    schema carries each Args: description and the description the rest of the docstring; a
    ValueError's message comes back once; a list of pydantic models comes back as JSON."""
    tools = shop_tools()
    script = [
        Reply(
            tool_calls=[
                ("c1", "shop_find_user_id_by_email", json.dumps({"email": "bob@b.com"})),
                ("c2", "shop_list_orders", json.dumps({"user_id": "u1"})),
                ("c3", "shop_get_user_details", json.dumps({"user_id": "u1"})),
            ]
        ),
        Reply("Ada has two orders."),
    ]
    calls_before = SHOP.calls
    with FakeOpenAI(script) as fake:
        monkeypatch.setenv("OPENAI_API_KEY", fake.api_key)
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        run = await run_agent(
            client,
            task_queue,
            AgentInput(
                prompt="What has bob@b.com ordered?",
                tools=tools,
                model=ModelSettings(provider="openai", model="gpt-fake-mini"),
                tool_approval=TRUSTED,
            ),
        )
        requests = [r.body for r in fake.requests]

    assert run.result is not None and run.result.answer == "Ada has two orders."
    offered = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    find = offered["shop_find_user_id_by_email"]
    assert find["description"] == (
        "Find a user's id by their email. Use it first, before any other tool.\n\n"
        "Returns:\n    The user id, such as 'u1'."
    )
    assert find["parameters"]["properties"]["email"] == {
        "type": "string",
        "description": "The user's email address, exactly as they gave it.",
    }
    cancel = offered["shop_cancel_pending_order"]["parameters"]["properties"]
    assert cancel["reason"]["description"] == "Why the user wants it cancelled, in their words."
    assert "Args:" not in json.dumps(offered)

    results = {
        m["tool_call_id"]: m["content"] for m in requests[1]["messages"] if m["role"] == "tool"
    }
    assert results["c1"] == (
        "Error: shop_find_user_id_by_email failed: ValueError: User not found. "
        "Check the arguments and try again."
    )
    assert [o["order_id"] for o in json.loads(results["c2"])] == ["#W2", "#W1"]
    assert json.loads(results["c3"]) == {"user_id": "u1", "name": "Ada Byron", "email": "ada@b.com"}
    assert SHOP.calls == calls_before + 3  # each ran once, on the instance registered
    outcomes = [(c.name, c.outcome, c.attempts) for c in run.trace[0].tool_calls]
    assert outcomes == [
        ("shop_find_user_id_by_email", "error", 1),
        ("shop_list_orders", "ok", 1),
        ("shop_get_user_details", "ok", 1),
    ]


@pytest.mark.parametrize(
    "docstring",
    [
        """Add two numbers.

        Args:
            a: The first
                number.
            b (float): The second number.

        Returns:
            Their sum.
        """,
        """Add two numbers.

        Parameters
        ----------
        a : float
            The first
            number.
        b : float
            The second number.

        Returns
        -------
        Their sum.
        """,
        """Add two numbers.

        :param a: The first
            number.
        :type a: float
        :param b: The second number.
        :returns: Their sum.
        """,
    ],
    ids=["google", "numpy", "rest"],
)
def test_parameter_descriptions_come_from_each_docstring_style(docstring: str) -> None:
    description, parameters = describe(docstring)

    assert parameters == {"a": "The first number.", "b": "The second number."}
    assert description.startswith("Add two numbers.\n\n")
    assert "Their sum." in description
    assert "first" not in description and "second" not in description


def test_a_field_description_wins_over_the_docstring() -> None:
    @tool(name="tk6_described")
    def described(a: Annotated[int, Field(description="From the Field.")], b: int) -> int:
        """Adds.

        Args:
            a: From the docstring.
            b: Only here.
        """
        return a + b

    (spec,) = tool_specs(["tk6_described"])
    assert spec.description == "Adds."
    assert spec.parameters["properties"]["a"]["description"] == "From the Field."
    assert spec.parameters["properties"]["b"]["description"] == "Only here."


def test_the_names_an_app_needs_come_from_the_package() -> None:
    import durable_agent
    from durable_agent.activities import toolkits, tools

    assert durable_agent.ToolError is tools.ToolError
    assert durable_agent.current_call is tools.current_call
    assert durable_agent.register_toolkit is toolkits.register_toolkit
    assert durable_agent.Toolkit is toolkits.Toolkit
    assert durable_agent.tool is tools.tool
