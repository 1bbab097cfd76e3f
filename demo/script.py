"""The offline demo: a support conversation (where is my order?), played by the scripted model
over the real demo tools, and the system prompt a real model gets for the same desk."""

from __future__ import annotations

from ..activities.pricing import DEMO_PRICE
from ..workflows.model_settings import ModelSettings, ScriptedCall, ScriptedTurn

SUPPORT_DEMO_SYSTEM = (
    "You are a customer-support agent for an online shop. Look facts up with the tools; never "
    "guess order data. Do not cancel, refund or email unless the customer asks for it. "
    "Answer briefly, in plain text, when you are done."
)
"""No timestamps or counters: the prompt is the start of a prefix the provider can cache."""

DEMO_PROMPT = "Where is my latest order? My email is a@b.com."
DEMO_MODEL = "scripted-demo"
"""The demo's model name, wherever it plays (the CLI, `contract --example`): a run of another
script is labelled with the model it was given, or the scripted provider's `scripted`."""


def support_demo_script(email: str = "a@b.com") -> list[ScriptedTurn]:
    return [
        ScriptedTurn(
            text="I need the customer's order history.",
            calls=[ScriptedCall(name="search_orders", arguments={"email": email})],
        ),
        ScriptedTurn(
            text="#1042 is the latest. Check the customer and its tracking.",
            expect='"id": 1042',
            calls=[
                ScriptedCall(name="get_customer", arguments={"email": email}),
                ScriptedCall(name="get_tracking", arguments={"order_id": 1042}),
            ],
        ),
        ScriptedTurn(
            expect="14:20",
            text=(
                "Your latest order, #1042, went by {last_tool_result.carrier} "
                "(tracking {last_tool_result.tracking_number}): {last_tool_result.summary}."
            ),
        ),
    ]


DEMO_PLAN = [
    "Look up the customer's orders by their email.",
    "Check the customer and the tracking of the latest order.",
    "Tell the customer where that order is.",
]


def demo_plan_script() -> list[ScriptedTurn]:
    """The support demo in plan mode: submit a plan first, carry it out once approved."""
    first, *rest = support_demo_script()
    return [
        ScriptedTurn(
            text="I will look the order up and tell the customer where it is.",
            calls=[ScriptedCall(name="submit_plan", arguments={"steps": DEMO_PLAN})],
        ),
        first.model_copy(update={"expect": "approved"}),
        *rest,
    ]


def conversation_demo_tail() -> list[ScriptedTurn]:
    """The scripted demo's later turns of a conversation: it has no more to say."""
    text = (
        "(scripted demo) I only replay the seeds' support conversation; set OPENAI_API_KEY "
        "or ANTHROPIC_API_KEY to talk with a real model."
    )
    return [ScriptedTurn(text=text) for _ in range(50)]


def demo_model(
    name: str = DEMO_MODEL, *, plan: bool = False, conversation: bool = False
) -> ModelSettings:
    """The scripted demo's model, wherever it plays (the CLI, `contract --example`): the support
    conversation, in plan mode with `plan`, and with the later turns' tail in a `conversation`.
    It carries a made-up price, so that its cost shows (a user's script does not)."""
    script = demo_plan_script() if plan else support_demo_script()
    if conversation:
        script += conversation_demo_tail()
    return ModelSettings(provider="scripted", model=name, script=script, price=DEMO_PRICE)
