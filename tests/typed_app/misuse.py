"""What the type checkers must refuse, each line marked with the errors mypy and pyright report
there. While the decorators returned Any and `current_call()` might be None, a tool called with
the wrong arguments went unseen, and so did a wrong type for the call's fields. Checked in
pyright's standard mode: its strict mode adds, after each error, the ones that follow from it."""

# pyright: standard

from activities import cancel_order, get_invoice, user_location
from durable_agent import approval_predicate, current_call, tool


async def misuse() -> None:
    get_invoice("1042")  # error: mypy[arg-type] pyright[reportArgumentType]
    cancel_order(1042)  # error: mypy[call-arg] pyright[reportCallIssue]
    user_location(precision=3)  # error: mypy[arg-type] pyright[reportArgumentType]
    attempt: str = current_call().attempt  # error: mypy[assignment] pyright[reportAssignmentType]
    print(attempt)


def undo(order_id: int) -> None:
    print(order_id)


@tool(side_effects=True, compensation=undo)  # error: mypy[arg-type] pyright[reportArgumentType]
def refund(order_id: int) -> str:
    return str(order_id)


@approval_predicate  # error: mypy[type-var] pyright[reportArgumentType,reportCallIssue]
def by_amount(amount: int) -> bool:
    return amount < 50
