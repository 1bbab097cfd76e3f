"""The app's own tests call its tools as the functions they are, typed as they were written."""

from activities import get_invoice, order_status, small_refunds


async def check_the_tools() -> None:
    invoice: dict[str, object] = get_invoice(1042)
    status: str = await order_status(1042)
    assert invoice["order_id"] == 1042 and status == "pending"
    assert small_refunds("issue_refund", {"amount": 20})
