"""A third-party toolkit as a benchmark would ship it: a class whose methods are the tools, with
Google-style docstrings, pydantic and dataclass return types, ValueErrors for what the model got
wrong, and its state in memory. Nothing in it knows about this project except `make_toolkit`,
which `--tools tests.retail_toolkit:make_toolkit` loads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from durable_agent.activities.toolkits import Toolkit


class Order(BaseModel):
    order_id: str
    user_id: str
    status: Literal["pending", "delivered", "cancelled"]
    items: list[str]


@dataclass
class User:
    user_id: str
    name: str
    email: str


class RetailTools:
    """The retail desk's tools over an in-memory store."""

    def __init__(self) -> None:
        self.users = {"u1": User("u1", "Ada Byron", "ada@b.com")}
        self.orders = {
            "#W1": Order(order_id="#W1", user_id="u1", status="pending", items=["lamp"]),
            "#W2": Order(order_id="#W2", user_id="u1", status="delivered", items=["desk"]),
        }
        self.calls = 0

    @property
    def busy(self) -> bool:
        """A property: never a tool, and never evaluated when the tools are listed."""
        raise AssertionError("a property was evaluated")

    def find_user_id_by_email(self, email: str) -> str:
        """Find a user's id by their email. Use it first, before any other tool.

        Args:
            email: The user's email address, exactly as they gave it.

        Returns:
            The user id, such as 'u1'.
        """
        self.calls += 1
        for user in self.users.values():
            if user.email == email:
                return user.user_id
        raise ValueError("User not found")

    def get_user_details(self, user_id: str) -> User:
        """Get a user's name and email.

        Args:
            user_id: The user's id, from find_user_id_by_email.
        """
        self.calls += 1
        if user_id not in self.users:
            raise ValueError("User not found")
        return self.users[user_id]

    def list_orders(self, user_id: str) -> list[Order]:
        """List a user's orders, newest first.

        Args:
            user_id: The user's id, from find_user_id_by_email.
        """
        self.calls += 1
        return [o for o in reversed(self.orders.values()) if o.user_id == user_id]

    def cancel_pending_order(self, order_id: str, reason: str) -> Order:
        """Cancel an order that has not shipped yet.

        Args:
            order_id: The order's id, such as '#W1'.
            reason: Why the user wants it cancelled, in their words.

        Raises:
            ValueError: The order does not exist or is not pending.
        """
        self.calls += 1
        order = self.orders.get(order_id)
        if order is None or order.status != "pending":
            raise ValueError(f"Order {order_id} is not pending")
        order.status = "cancelled"
        return order

    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: Digits and + - * / ( ) only.
        """
        return str(eval(expression, {"__builtins__": {}}))

    def _audit(self) -> None:
        """Private: never a tool."""

    @classmethod
    def from_config(cls, path: str) -> RetailTools:
        """Another constructor: not a tool unless listed."""
        return cls()

    @staticmethod
    def currency() -> str:
        """The store's currency, such as 'EUR'."""
        return "EUR"


class MathTools:
    """A second toolkit with a `calculate` of its own."""

    def calculate(self, a: float, b: float) -> float:
        """Add two numbers.

        Args:
            a: The first number.
            b: The second number.
        """
        return a + b


def make_toolkit() -> Toolkit:
    """What `--tools tests.retail_toolkit:make_toolkit` registers."""
    return Toolkit(RetailTools(), side_effects={"cancel_pending_order"})
