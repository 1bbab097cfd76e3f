"""The app's tools, written as docs/tools.md, docs/side-effects.md and
docs/people-in-the-loop.md write them: a read-only tool, a tool a person approves, a tool with a
compensation that reads its call, a callback tool, and approval predicates."""

from typing import Annotated, Any

from pydantic import BaseModel, Field

from durable_agent import (
    CompensationInput,
    RetrySettings,
    ToolError,
    approval_predicate,
    callback_tool,
    current_call,
    tool,
)

ORDERS: dict[int, str] = {1042: "pending"}
APPLIED: dict[str, dict[str, str]] = {}


@tool(timeout_seconds=10)
def get_invoice(
    order_id: Annotated[int, Field(description="The order's number, e.g. 1042")],
) -> dict[str, object]:
    """Look up the invoice of one order."""
    return {"order_id": order_id, "total": 12.5}


@tool
async def order_status(order_id: int) -> str:
    """Where an order is now."""
    return ORDERS.get(order_id, "unknown")


@tool(side_effects=True, needs_approval=True)
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email to a customer; a person approves each one."""
    return f"sent {subject!r} to {to}"


def reinstate_order(undo: CompensationInput) -> str:
    """Undo a cancel, found by the cancel's own key."""
    if APPLIED.pop(undo.idempotency_key, None) is not None:
        ORDERS[int(undo.arguments["order_id"])] = "pending"
    return "reinstated"


@tool(side_effects=True, compensation=reinstate_order, retry=RetrySettings(maximum_attempts=1))
def cancel_order(order_id: int, reason: str) -> dict[str, str]:
    """Cancel an order that has not shipped yet."""
    call = current_call()
    if call.idempotency_key in APPLIED:
        return APPLIED[call.idempotency_key]
    if ORDERS.get(order_id) != "pending":
        raise ToolError(f"Order {order_id} is not pending")
    ORDERS[order_id] = "cancelled"
    APPLIED[call.idempotency_key] = {"order_id": str(order_id), "run": call.workflow_id}
    return APPLIED[call.idempotency_key]


class Location(BaseModel):
    city: str
    accuracy_m: int


@callback_tool(timeout_seconds=120)
def user_location(precision: str = "city") -> Location:
    """Where the user's browser is.

    Args:
        precision: "city" or "street".
    """
    raise NotImplementedError("a client answers it: AgentRun.answer_callback")


@approval_predicate
def small_refunds(tool: str, arguments: dict[str, Any]) -> bool:
    return tool == "issue_refund" and arguments.get("amount", 0) <= 50


@approval_predicate(name="known_orders")
def cancels_of_known_orders(tool: str, arguments: dict[str, Any]) -> bool:
    return tool == "cancel_order" and arguments.get("order_id") in ORDERS
