"""The offline demo: a support conversation (where is my order?), played by the scripted model
over the real demo tools, and the system prompt a real model gets for the same desk."""

from __future__ import annotations

from ..workflows.inputs import ScriptedCall, ScriptedTurn

SUPPORT_DEMO_SYSTEM = (
    "You are a customer-support agent for an online shop. Look facts up with the tools; never "
    "guess order data. Do not cancel, refund or email unless the customer asks for it. "
    "Answer briefly, in plain text, when you are done."
)
"""No timestamps or counters: the prompt is the start of a prefix the provider can cache."""

DEMO_PROMPT = "Where is my latest order? My email is a@b.com."


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
