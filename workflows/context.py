"""What every part of a run reads: its input, its state, and the behaviours its history decided.

The workflow builds it first, in its `__init__`, and hands the one object to each part it builds.
The input never changes; the state is the run's live state, which the parts share and
continue-as-new carries whole. The behaviours are decided once, as the run's first act
(versioning.decide, in `AgentWorkflow.run`), and not in `__init__`: a patch's marker must come
after the handlers of the first workflow task, as it did in every run recorded so far (an update
accepted in that task would otherwise meet the marker in its place, and the replay fail). So the
parts that handlers use (the reporter, the gates, the saga, the conversation) are built in
`__init__` and read `behaviours` when they act; the loop's parts (the model gateway, the context
window, the tool runner, loop detection, call ids) are built once it is decided.
Deterministic data only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .inputs import AgentInput
from .state import RunState
from .versioning import LEGACY, Behaviours


@dataclass
class RunContext:
    input: AgentInput
    state: RunState
    behaviours: Behaviours = LEGACY
    """What the run's history decided (versioning.Behaviours); LEGACY until the run decides,
    which a handler of its first workflow task may see, as it always did."""
