"""Releases and patch ids: what an upgraded fleet replays.

A worker of a new release replays the runs an older release began: they wait for a person, or
sit between two turns of a conversation, for days. So every release's recorded histories
(CHANGELOG.md, tests/histories/releases/VERSION/) replay with today's code, and so do those
recorded from the commits that landed a patch id later renamed (tests/histories/landed/COMMIT/).
And no patch id that landed on main is ever renamed or removed: a history with its marker
cannot replay on code that does not ask for it (workflows/versioning.py, PATCH_IDS).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

import durable_agent.workflows.versioning as versioning
from durable_agent.activities import toolkits
from durable_agent.serving.worker import replayer
from tests.record_release import SCENARIOS, workflow_id

ROOT = Path(__file__).parent.parent
HISTORIES = Path(__file__).parent / "histories"
RELEASES = HISTORIES / "releases"
LANDED = HISTORIES / "landed"
VERSIONING = ROOT / "workflows" / "versioning.py"
REQUIRED = {"run_completed", "plan_waiting", "tool_call_waiting", "conversation_mid_turn"}
"""What every release records at least (issue 37): a run that waits on approval, and a
conversation in the middle of a turn."""
PATCH_CALLS = re.compile(r"workflow\.(patched|deprecate_patch)\(")
NOT_SHIPPED = (":!tests", ":!bench")
"""Code that no worker of a release runs: a test's own patch ids are not the product's."""


def released_versions() -> list[str]:
    """The versions CHANGELOG.md has released, newest first."""
    text = (ROOT / "CHANGELOG.md").read_text()
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.MULTILINE)


def patch_ids_asked(source: str) -> set[str]:
    """The ids a module passes to workflow.patched or workflow.deprecate_patch, as literals or
    as module-level string constants."""
    tree = ast.parse(source)
    constants = {
        node.targets[0].id: node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    asked: set[str] = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("patched", "deprecate_patch")
            and node.args
        ):
            continue
        argument = node.args[0]
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            asked.add(argument.value)
        elif isinstance(argument, ast.Name):
            assert argument.id in constants, f"a patch id that is not a constant: {argument.id}"
            asked.add(constants[argument.id])
    return asked


def markers(path: Path) -> set[str]:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    found = set()
    for event in history.events:
        attributes = event.marker_recorded_event_attributes
        if attributes.marker_name == "core_patch":
            data = attributes.details["patch-data"].payloads[0].data
            found.add(json.loads(data)["id"])
    return found


def recorded() -> list[Path]:
    return sorted([*RELEASES.glob("*/*.json"), *LANDED.glob("*/*.json")])


def test_the_version_is_the_newest_release() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = released_versions()
    assert releases, "CHANGELOG.md has no release"
    assert releases[0] == version, f"pyproject.toml says {version}; CHANGELOG.md {releases[0]}"


def test_every_release_has_its_histories() -> None:
    for version in released_versions():
        names = {path.stem for path in (RELEASES / version).glob("*.json")}
        missing = REQUIRED - names
        assert not missing, (
            f"release {version} has no recorded {sorted(missing)}: run "
            f"`python -m tests.record_release tests/histories/releases/{version}` on its code"
        )
    assert set(SCENARIOS) >= REQUIRED
    assert {path.name for path in RELEASES.iterdir()} == set(released_versions())


@pytest.fixture(scope="module")
def demo_tools() -> None:
    toolkits.load_default_tools()


@pytest.mark.parametrize("path", recorded(), ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_a_recorded_history_replays(path: Path, demo_tools: None) -> None:
    history = WorkflowHistory.from_json(workflow_id(path), path.read_text())

    result = await replayer().replay_workflow(history, raise_on_replay_failure=False)

    assert result.replay_failure is None, str(result.replay_failure)[:2000]


def test_the_landed_histories_carry_the_ids_they_are_kept_for() -> None:
    talking = markers(LANDED / "fa009d9" / "conversation_mid_turn.json")
    assert versioning.RELEASE_5_FIRST_ID in talking
    older = markers(LANDED / "761759d" / "tool_call_waiting.json")
    assert {versioning.TOOL_APPROVAL_FIRST_ID, versioning.BOUNDED_DISPATCH_FIRST_ID} <= older


# --- patch ids: append-only ----------------------------------------------------------------


def test_the_code_asks_every_live_patch_id_and_no_other() -> None:
    asked = patch_ids_asked(VERSIONING.read_text())
    live = set(versioning.PATCH_IDS) - set(versioning.RETIRED_PATCH_IDS)
    assert asked == live, (
        f"asked but not in PATCH_IDS: {sorted(asked - live)}; in PATCH_IDS but no longer asked "
        f"(retire an id only as docs/deployment.md says): {sorted(live - asked)}"
    )
    elsewhere = [
        path.relative_to(ROOT)
        for folder in ("workflows", "activities", "durable_agent", "cli")
        for path in (ROOT / folder).rglob("*.py")
        if path != VERSIONING and PATCH_CALLS.search(path.read_text())
    ]
    assert not elsewhere, f"workflow.patched outside workflows/versioning.py: {elsewhere}"


def test_a_retired_patch_id_names_the_release_that_retired_it() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    for patch_id, release in versioning.RETIRED_PATCH_IDS.items():
        assert patch_id in versioning.PATCH_IDS
        entry = changelog.split(f"## [{release}]", 1)
        assert len(entry) == 2, f"{patch_id} was retired by {release}, which is not released"
        assert patch_id in entry[1].split("\n## [", 1)[0], f"{release}'s entry omits {patch_id}"


def test_every_marker_in_a_committed_history_is_a_known_patch_id() -> None:
    for path in sorted(HISTORIES.rglob("*.json")):
        unknown = markers(path) - set(versioning.PATCH_IDS)
        assert not unknown, f"{path.relative_to(HISTORIES)} has markers no code asks: {unknown}"


def _git(*args: str, input: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, input=input, check=True
    ).stdout


def _shipped_sources_of_main() -> Iterator[tuple[str, str]]:
    """(commit, source) of every shipped Python file that asks a patch, in every commit of
    main's first-parent line (what was deployed), each distinct file once."""
    commits = _git("rev-list", "--first-parent", "HEAD").split()
    grep = ["grep", "-l", "-E", PATCH_CALLS.pattern, *commits, "--", "*.py", *NOT_SHIPPED]
    # Not _git: grep exits 1 for a commit with no match at all.
    hits = subprocess.run(
        ["git", "-C", str(ROOT), *grep], capture_output=True, text=True
    ).stdout.split()
    blobs: dict[str, str] = {}
    for hit, line in zip(hits, _git("rev-parse", *hits).split(), strict=True):
        blobs.setdefault(line, hit.split(":", 1)[0])
    for blob, commit in blobs.items():
        yield commit, _git("cat-file", "blob", blob)


def test_no_patch_id_that_landed_on_main_was_renamed_or_removed() -> None:
    """Every id any commit of main ever asked is in the ledger: renaming one in the code and
    the ledger together still fails here."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the ledger is checked against the code and histories only")
    if _git("rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.skip("a shallow clone: `git fetch --unshallow` to check every commit of main")
    landed: dict[str, str] = {}
    for commit, source in _shipped_sources_of_main():
        for patch_id in patch_ids_asked(source):
            landed.setdefault(patch_id, commit)
    missing = {i: c[:7] for i, c in landed.items() if i not in versioning.PATCH_IDS}
    assert not missing, f"patch ids that landed and are gone (id: a commit asking it): {missing}"
    assert versioning.RELEASE_5_FIRST_ID in landed  # the scan finds what it is for


def test_the_scan_finds_a_renamed_id(tmp_path: Path) -> None:
    """The AST reading catches a rename of a constant, the way the 2026-12-01 rename was made."""
    before = 'from temporalio import workflow\nRELEASE = "first-id"\nworkflow.patched(RELEASE)\n'
    after = before.replace("first-id", "second-id")
    assert patch_ids_asked(before) == {"first-id"}
    assert patch_ids_asked(after) == {"second-id"}
    assert patch_ids_asked("from temporalio import workflow\nworkflow.patched('literal')\n") == {
        "literal"
    }
