"""Customer-support demo tools over a real SQLite database.

The database lives at `$AGENT_DEMO_DB`, or `.agent-demo/demo.db` under the current directory, and
is created and seeded on first use (safely, when several threads or processes get there at once).
Delete the file to start over. Every call opens its own short-lived connection: tools run in
threads, and a connection must not be shared between them.

Seed data: a@b.com ("Ada Byron") with three delivered orders, the latest being 1042, delivered
yesterday (relative to seeding) at 14:20 UTC; and bulk@b.com with 5,000 orders, to show that a
listing tool returns a bounded page and a count rather than everything.

Timestamps are stored as ISO-8601 UTC strings (`2026-11-28T14:20:00Z`), money as integer cents.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from ..activities.sqlite_wal import owner_only, use_wal
from ..activities.tools import current_call, tool
from ..workflows.state import CompensationInput

DB_PATH_ENV = "AGENT_DEMO_DB"
DEFAULT_DB_PATH = Path(".agent-demo") / "demo.db"
SEARCH_LIMIT = 20
BUSY_TIMEOUT_SECONDS = 30.0

DEMO_TOOL_NAMES = (
    "search_orders",
    "get_order",
    "get_tracking",
    "get_customer",
    "cancel_order",
    "issue_refund",
    "send_email",
)
"""Every tool this module registers, for a run's `tools` list."""

CANCELLABLE_STATUSES = ("processing", "shipped")

_EMAIL_PATTERN = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS customers (
        email TEXT PRIMARY KEY COLLATE NOCASE,
        name TEXT NOT NULL,
        member_since TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS orders (
        id INTEGER PRIMARY KEY,
        customer_email TEXT NOT NULL COLLATE NOCASE REFERENCES customers (email),
        created_at TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('processing', 'shipped', 'delivered', 'cancelled')),
        total_cents INTEGER NOT NULL CHECK (total_cents >= 0),
        currency TEXT NOT NULL,
        items TEXT NOT NULL,
        cancelled_at TEXT,
        cancel_reason TEXT
    )
    """,
    """
    CREATE INDEX IF NOT EXISTS orders_by_customer ON orders (customer_email, created_at DESC)
    """,
    """
    CREATE TABLE IF NOT EXISTS tracking (
        order_id INTEGER PRIMARY KEY REFERENCES orders (id),
        carrier TEXT NOT NULL,
        tracking_number TEXT NOT NULL,
        shipped_at TEXT NOT NULL,
        delivered_at TEXT,
        last_event TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS refunds (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        order_id INTEGER NOT NULL REFERENCES orders (id),
        amount_cents INTEGER NOT NULL CHECK (amount_cents > 0),
        created_at TEXT NOT NULL,
        reversed_at TEXT
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS applied_calls (
        idempotency_key TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        result TEXT NOT NULL,
        applied_at TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        to_address TEXT NOT NULL,
        subject TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at TEXT NOT NULL
    )
    """,
)


# --- database -----------------------------------------------------------------------------------


def demo_db_path() -> Path:
    """Where the demo database lives: `$AGENT_DEMO_DB`, else `.agent-demo/demo.db` here.

    Read at every call, so a test (or a worker) can point it elsewhere at any time.
    """
    configured = os.environ.get(DB_PATH_ENV)
    return Path(configured) if configured else Path.cwd() / DEFAULT_DB_PATH


@contextmanager
def connect(path: str | Path | None = None) -> Iterator[sqlite3.Connection]:
    """A short-lived connection to the demo database, created and seeded if needed.

    The connection is in autocommit mode (`isolation_level=None`): writers open their own
    `BEGIN IMMEDIATE` transactions. Rows come back as `sqlite3.Row`. Closed on exit.
    """
    db_path = Path(path) if path is not None else demo_db_path()
    owner_only(db_path)
    connection = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
    try:
        connection.row_factory = sqlite3.Row
        # Every commit on the disk: these rows are what the tools changed.
        use_wal(connection, BUSY_TIMEOUT_SECONDS, fsync=True)
        connection.execute("PRAGMA foreign_keys = ON")
        _ensure_seeded(connection)
        yield connection
    finally:
        connection.close()


@contextmanager
def _write_transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """Take the write lock up front, so a read-check-write cannot interleave with another."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _ensure_seeded(connection: sqlite3.Connection) -> None:
    if _is_seeded(connection):
        return
    with _write_transaction(connection):
        # Checked again under the write lock: another thread or process may have seeded the
        # database between the first check and getting the lock.
        for statement in _SCHEMA:
            connection.execute(statement)
        if connection.execute("SELECT 1 FROM customers LIMIT 1").fetchone() is None:
            _seed(connection, _now())


def _is_seeded(connection: sqlite3.Connection) -> bool:
    has_table = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'customers'"
    ).fetchone()
    if has_table is None:
        return False
    return connection.execute("SELECT 1 FROM customers LIMIT 1").fetchone() is not None


def _seed(connection: sqlite3.Connection, now: datetime) -> None:
    now = now.astimezone(UTC).replace(microsecond=0)
    yesterday_1420 = datetime.combine(
        now.date() - timedelta(days=1), datetime.min.time(), tzinfo=UTC
    ).replace(hour=14, minute=20)

    connection.executemany(
        "INSERT INTO customers (email, name, member_since) VALUES (?, ?, ?)",
        [
            ("a@b.com", "Ada Byron", _iso(now - timedelta(days=412))),
            ("bulk@b.com", "Bulk Buyer Ltd", _iso(now - timedelta(days=2400))),
        ],
    )

    ada_orders = [
        (1040, now - timedelta(days=95), 5900, "Desk lamp (1)"),
        (1041, now - timedelta(days=40), 2450, "USB-C cable, 2 m (2)"),
        (1042, now - timedelta(days=3), 12999, "Noise-cancelling headphones (1)"),
    ]
    ada_tracking = [
        (1040, "DHL", "JD014600003828", now - timedelta(days=94), now - timedelta(days=91)),
        (
            1041,
            "USPS",
            "9400111899223344556677",
            now - timedelta(days=39),
            now - timedelta(days=37),
        ),
        (1042, "UPS", "1Z999AA10123456784", now - timedelta(days=2), yesterday_1420),
    ]
    connection.executemany(
        "INSERT INTO orders (id, customer_email, created_at, status, total_cents, currency, items)"
        " VALUES (?, 'a@b.com', ?, 'delivered', ?, 'USD', ?)",
        [(order_id, _iso(created), cents, items) for order_id, created, cents, items in ada_orders],
    )
    connection.executemany(
        "INSERT INTO tracking"
        " (order_id, carrier, tracking_number, shipped_at, delivered_at, last_event)"
        " VALUES (?, ?, ?, ?, ?, 'Delivered, left at front door')",
        [
            (order_id, carrier, number, _iso(shipped), _iso(delivered))
            for order_id, carrier, number, shipped, delivered in ada_tracking
        ],
    )

    bulk_orders, bulk_tracking = _bulk_rows(now)
    connection.executemany(
        "INSERT INTO orders (id, customer_email, created_at, status, total_cents, currency, items,"
        " cancelled_at, cancel_reason) VALUES (?, 'bulk@b.com', ?, ?, ?, 'USD', ?, ?, ?)",
        bulk_orders,
    )
    connection.executemany(
        "INSERT INTO tracking"
        " (order_id, carrier, tracking_number, shipped_at, delivered_at, last_event)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        bulk_tracking,
    )


BULK_ORDER_COUNT = 5_000
BULK_FIRST_ID = 100_000

_BULK_ITEMS = (
    "Printer paper, A4, 5 reams (4)",
    "Toner cartridge (2)",
    "Ballpoint pens, box of 50 (3)",
    "Sticky notes (12)",
    "Coffee beans, 1 kg (6)",
    "Paper towels (10)",
    "Stapler (1)",
)
_CARRIERS = ("UPS", "DHL", "FedEx", "USPS")


def _bulk_rows(now: datetime) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """5,000 orders, one every 6 hours back from an hour ago; the highest id is the newest.

    The 3 newest are processing, the next 5 shipped, every 41st older one cancelled, the rest
    delivered, so every timestamp is in the past and shipped_at < delivered_at.
    """
    orders: list[tuple[Any, ...]] = []
    tracking: list[tuple[Any, ...]] = []
    for age in range(BULK_ORDER_COUNT):
        order_id = BULK_FIRST_ID + BULK_ORDER_COUNT - 1 - age
        created = now - timedelta(hours=1 + 6 * age)
        if age < 3:
            status = "processing"
        elif age < 8:
            status = "shipped"
        elif age % 41 == 0:
            status = "cancelled"
        else:
            status = "delivered"
        cancelled_at = _iso(created + timedelta(hours=1)) if status == "cancelled" else None
        reason = "Ordered twice by mistake" if status == "cancelled" else None
        cents = 1_000 + (age * 7_919) % 20_000
        orders.append(
            (
                order_id,
                _iso(created),
                status,
                cents,
                _BULK_ITEMS[age % len(_BULK_ITEMS)],
                cancelled_at,
                reason,
            )
        )
        if status in ("shipped", "delivered"):
            shipped = created + timedelta(hours=3)
            delivered = created + timedelta(days=1) if status == "delivered" else None
            tracking.append(
                (
                    order_id,
                    _CARRIERS[age % len(_CARRIERS)],
                    f"BULK{order_id}",
                    _iso(shipped),
                    _iso(delivered) if delivered else None,
                    "Delivered to reception" if delivered else "In transit to destination hub",
                )
            )
    return orders, tracking


# --- helpers ------------------------------------------------------------------------------------


def _now() -> datetime:
    """The current time; tests replace it to pin seeding and relative dates."""
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _money(cents: int, currency: str) -> dict[str, Any]:
    return {"amount": round(cents / 100, 2), "currency": currency}


def _amount_text(cents: int, currency: str) -> str:
    return f"{cents / 100:.2f} {currency}"


def describe_moment(text: str, now: datetime | None = None) -> str:
    """`2026-11-28 at 14:20 UTC (yesterday)`: the relative day is computed against `now`."""
    moment = _parse(text)
    current = (now or _now()).astimezone(UTC)
    days = (current.date() - moment.date()).days
    absolute = f"{moment:%Y-%m-%d} at {moment:%H:%M} UTC"
    if days == 0:
        return f"{absolute} (today)"
    if days == 1:
        return f"{absolute} (yesterday)"
    if days > 1:
        return f"{absolute} ({days} days ago)"
    return absolute


def _normalize_email(email: str) -> str:
    return email.strip()


def _order_not_found(order_id: int) -> dict[str, Any]:
    return {
        "found": False,
        "order_id": order_id,
        "message": (
            f"no order {order_id}. Order ids are whole numbers such as 1042; use search_orders "
            "with the customer's email to list their order ids."
        ),
    }


def _customer_not_found(email: str) -> dict[str, Any]:
    return {
        "found": False,
        "email": email,
        "message": (
            f"no customer with email {email!r}. Emails must match exactly (case is ignored); "
            "check the spelling with the customer."
        ),
    }


def _refunded_cents(connection: sqlite3.Connection, order_id: int) -> int:
    row = connection.execute(
        "SELECT COALESCE(SUM(amount_cents), 0) FROM refunds"
        " WHERE order_id = ? AND reversed_at IS NULL",
        (order_id,),
    ).fetchone()
    return int(row[0])


def outbox(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every email `send_email` has queued, oldest first: id, to, subject, body, created_at."""
    with connect(path) as connection:
        rows = connection.execute(
            "SELECT id, to_address, subject, body, created_at FROM outbox ORDER BY id"
        ).fetchall()
    return [
        {
            "id": row["id"],
            "to": row["to_address"],
            "subject": row["subject"],
            "body": row["body"],
            "created_at": row["created_at"],
        }
        for row in rows
    ]


# --- read-only tools ----------------------------------------------------------------------------

EmailArgument = Annotated[
    str,
    Field(
        description=(
            "The customer's email address, e.g. a@b.com. Matched exactly, ignoring upper/lower "
            "case and surrounding spaces."
        )
    ),
]
OrderIdArgument = Annotated[
    int, Field(description="The order id, a whole number such as 1042 (no '#' or prefix).")
]


@tool
def search_orders(email: EmailArgument) -> dict[str, Any]:
    """List a customer's orders, newest first, to find the id of the order they mean.

    Use this when you know the customer's email but not the order id; then call get_order or
    get_tracking with an id from the list. Returns at most the 20 newest orders, each with id,
    created_at (ISO-8601 UTC), status (processing, shipped, delivered or cancelled) and total
    (amount and currency), plus total_orders, the customer's full order count. Older orders are
    never returned: when total_orders is larger than returned, the list is not complete, so do not
    describe it as all of the customer's orders. The email must equal the customer's address
    exactly, ignoring upper/lower case and surrounding spaces; there is no partial or fuzzy
    matching. An unknown email gives found=false and a message, not an error.
    """
    email = _normalize_email(email)
    with connect() as connection:
        customer = connection.execute(
            "SELECT email FROM customers WHERE email = ?", (email,)
        ).fetchone()
        if customer is None:
            return _customer_not_found(email)
        total = connection.execute(
            "SELECT COUNT(*) FROM orders WHERE customer_email = ?", (email,)
        ).fetchone()[0]
        rows = connection.execute(
            "SELECT id, created_at, status, total_cents, currency FROM orders"
            " WHERE customer_email = ? ORDER BY created_at DESC, id DESC LIMIT ?",
            (email, SEARCH_LIMIT),
        ).fetchall()
    return {
        "found": True,
        "email": customer["email"],
        "total_orders": total,
        "returned": len(rows),
        "orders": [
            {
                "id": row["id"],
                "created_at": row["created_at"],
                "status": row["status"],
                "total": _money(row["total_cents"], row["currency"]),
            }
            for row in rows
        ],
    }


@tool
def get_order(order_id: OrderIdArgument) -> dict[str, Any]:
    """Full details of one order, by id.

    Use this when you have an order id (from the customer or from search_orders) and need what
    was bought or the money involved; use get_tracking for where the parcel is. Returns id,
    customer_email, created_at (ISO-8601 UTC), status (processing, shipped, delivered or
    cancelled), items (a short text), total, refunded (the sum of earlier refunds) and refundable
    (what issue_refund can still pay back), plus cancelled_at and cancel_reason when cancelled.
    Amounts are objects with amount and currency. An unknown id gives found=false and a message,
    not an error.
    """
    with connect() as connection:
        row = connection.execute("SELECT * FROM orders WHERE id = ?", (order_id,)).fetchone()
        if row is None:
            return _order_not_found(order_id)
        refunded = _refunded_cents(connection, order_id)
    currency = row["currency"]
    order: dict[str, Any] = {
        "found": True,
        "id": row["id"],
        "customer_email": row["customer_email"],
        "created_at": row["created_at"],
        "status": row["status"],
        "items": row["items"],
        "total": _money(row["total_cents"], currency),
        "refunded": _money(refunded, currency),
        "refundable": _money(row["total_cents"] - refunded, currency),
    }
    if row["status"] == "cancelled":
        order["cancelled_at"] = row["cancelled_at"]
        order["cancel_reason"] = row["cancel_reason"]
    return order


@tool
def get_tracking(order_id: OrderIdArgument) -> dict[str, Any]:
    """Shipping status of one order, by id: has it shipped, where is it, when did it arrive.

    Use this for "where is my order" and "when was it delivered" questions. Returns order_id,
    status, carrier, tracking_number, shipped_at and delivered_at (ISO-8601 UTC, null when it has
    not happened yet), last_event (the carrier's latest scan) and summary, one line to quote to
    the customer such as "Delivered 2026-11-28 at 14:20 UTC (yesterday)"; words like "yesterday"
    in it are worked out from today's date, so prefer them to your own date arithmetic. An order
    that has not shipped has no carrier or tracking number. An unknown id gives found=false and a
    message, not an error.
    """
    with connect() as connection:
        order = connection.execute(
            "SELECT id, status, created_at, cancelled_at FROM orders WHERE id = ?", (order_id,)
        ).fetchone()
        if order is None:
            return _order_not_found(order_id)
        shipment = connection.execute(
            "SELECT * FROM tracking WHERE order_id = ?", (order_id,)
        ).fetchone()
    now = _now()
    status = order["status"]
    result: dict[str, Any] = {
        "found": True,
        "order_id": order["id"],
        "status": status,
        "carrier": shipment["carrier"] if shipment else None,
        "tracking_number": shipment["tracking_number"] if shipment else None,
        "shipped_at": shipment["shipped_at"] if shipment else None,
        "delivered_at": shipment["delivered_at"] if shipment else None,
        "last_event": shipment["last_event"] if shipment else None,
    }
    if shipment and shipment["delivered_at"]:
        summary = f"Delivered {describe_moment(shipment['delivered_at'], now)}"
    elif status == "cancelled":
        summary = f"Cancelled {describe_moment(order['cancelled_at'], now)}"
        if shipment:
            summary += f"; it had shipped {describe_moment(shipment['shipped_at'], now)}"
    elif shipment:
        summary = (
            f"Shipped {describe_moment(shipment['shipped_at'], now)} with {shipment['carrier']} "
            f"(tracking {shipment['tracking_number']}), not delivered yet; "
            f"last event: {shipment['last_event']}"
        )
    else:
        summary = f"Not shipped yet; ordered {describe_moment(order['created_at'], now)}"
    result["summary"] = summary
    return result


@tool
def get_customer(email: EmailArgument) -> dict[str, Any]:
    """A customer's profile, by email: name, email, member_since (ISO-8601 UTC) and order_count.

    Use this to check who you are talking to, or how long they have been a customer; use
    search_orders for their orders themselves. The email must equal the customer's address
    exactly, ignoring upper/lower case and surrounding spaces. An unknown email gives found=false
    and a message, not an error.
    """
    email = _normalize_email(email)
    with connect() as connection:
        row = connection.execute(
            "SELECT c.email, c.name, c.member_since, COUNT(o.id) AS order_count"
            " FROM customers c LEFT JOIN orders o ON o.customer_email = c.email"
            " WHERE c.email = ? GROUP BY c.email",
            (email,),
        ).fetchone()
    if row is None:
        return _customer_not_found(email)
    return {
        "found": True,
        "name": row["name"],
        "email": row["email"],
        "member_since": row["member_since"],
        "order_count": row["order_count"],
    }


# --- side-effecting tools -----------------------------------------------------------------------
#
# Each applies its effect at most once per call: the effect and the call's idempotency key are
# written in one transaction, and a retry of the same call (by Temporal, or after a worker died
# between the commit and the activity's completion) finds the key and returns the first result.
# Each has a compensation that undoes it when a run ends without an answer.


def _apply_once(
    tool_name: str,
    effect: Callable[[sqlite3.Connection], dict[str, Any]],
    key: str | None = None,
) -> dict[str, Any]:
    """Apply `effect` and record it under `key` (the current call's idempotency key by default)
    in one transaction; a key already recorded returns the first result and changes nothing."""
    if key is None:
        # Called outside a tool call (a test, a script), there is no key to apply it once by.
        with suppress(RuntimeError):
            key = current_call().idempotency_key
    with connect() as connection, _write_transaction(connection):
        if key is not None:
            done = connection.execute(
                "SELECT result FROM applied_calls WHERE idempotency_key = ?", (key,)
            ).fetchone()
            if done is not None:
                return dict(json.loads(done["result"]))
        result = effect(connection)
        if key is not None:
            connection.execute(
                "INSERT INTO applied_calls (idempotency_key, tool, result, applied_at)"
                " VALUES (?, ?, ?, ?)",
                (key, tool_name, json.dumps(result), _iso(_now())),
            )
    return result


def applied_calls(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Every side effect applied through a tool call, oldest first: key, tool and result."""
    with connect(path) as connection:
        rows = connection.execute(
            "SELECT idempotency_key, tool, result FROM applied_calls ORDER BY rowid"
        ).fetchall()
    return [
        {
            "idempotency_key": r["idempotency_key"],
            "tool": r["tool"],
            "result": json.loads(r["result"]),
        }
        for r in rows
    ]


def _what_was_done(undo: CompensationInput) -> dict[str, Any]:
    """The call's own result, or, when its outcome is unknown (cancelled, timed out, failed
    after starting), what the database recorded under its idempotency key: nothing if the
    effect never happened."""
    if undo.result:
        return dict(undo.result)
    with connect() as connection:
        done = connection.execute(
            "SELECT result FROM applied_calls WHERE idempotency_key = ?", (undo.idempotency_key,)
        ).fetchone()
    return dict(json.loads(done["result"])) if done is not None else {}


def reinstate_order(undo: CompensationInput) -> dict[str, Any]:
    """Undo cancel_order: the order gets back the status it had before the cancellation."""
    result = _what_was_done(undo)
    if not result.get("cancelled"):
        return {"reinstated": False, "message": "the call cancelled nothing; nothing to undo"}
    order_id, previous = result["order_id"], result["previous_status"]

    def reinstate(connection: sqlite3.Connection) -> dict[str, Any]:
        connection.execute(
            "UPDATE orders SET status = ?, cancelled_at = NULL, cancel_reason = NULL"
            " WHERE id = ? AND status = 'cancelled'",
            (previous, order_id),
        )
        if previous == "shipped":
            connection.execute(
                "UPDATE tracking SET last_event = 'Cancellation withdrawn; delivery continues'"
                " WHERE order_id = ?",
                (order_id,),
            )
        return {"reinstated": True, "order_id": order_id, "status": previous}

    return _apply_undo(undo, reinstate)


def reverse_refund(undo: CompensationInput) -> dict[str, Any]:
    """Undo issue_refund: the refund is marked reversed and no longer counts as paid back."""
    result = _what_was_done(undo)
    if not result.get("refunded"):
        return {"reversed": False, "message": "the call refunded nothing; nothing to undo"}
    refund_id = result["refund_id"]

    def reverse(connection: sqlite3.Connection) -> dict[str, Any]:
        connection.execute(
            "UPDATE refunds SET reversed_at = ? WHERE id = ? AND reversed_at IS NULL",
            (_iso(_now()), refund_id),
        )
        return {"reversed": True, "refund_id": refund_id}

    return _apply_undo(undo, reverse)


def send_correction(undo: CompensationInput) -> dict[str, Any]:
    """Follow up send_email: an email cannot be unsent, so a correction goes to the same address."""
    result = _what_was_done(undo)
    if not result.get("sent"):
        return {"corrected": False, "message": "no email was sent; nothing to correct"}
    to, subject = result["to"], result["subject"]
    body = (
        f'Please disregard our earlier email "{subject}". It was sent by an automated assistant '
        "whose task did not complete, so what it said may not have happened. An email cannot be "
        "unsent; this correction follows it instead. We will be in touch if anything is needed."
    )

    def correct(connection: sqlite3.Connection) -> dict[str, Any]:
        cursor = connection.execute(
            "INSERT INTO outbox (to_address, subject, body, created_at) VALUES (?, ?, ?, ?)",
            (to, f"Correction: {subject}", body, _iso(_now())),
        )
        return {"corrected": True, "outbox_id": cursor.lastrowid, "to": to}

    return _apply_undo(undo, correct)


def _apply_undo(
    undo: CompensationInput, effect: Callable[[sqlite3.Connection], dict[str, Any]]
) -> dict[str, Any]:
    """Undo once: keyed by the original call's key, so a retried compensation changes nothing."""
    return _apply_once(f"undo {undo.tool}", effect, key=f"{undo.idempotency_key}#undo")


@tool(side_effects=True, compensation=reinstate_order)
def cancel_order(
    order_id: OrderIdArgument,
    reason: Annotated[
        str,
        Field(
            min_length=1,
            description="Why the order is cancelled, in a few words; kept on the order.",
        ),
    ],
) -> dict[str, Any]:
    """Cancel an order. This changes real data: the cancellation is recorded.

    Only orders whose status is processing, or shipped but not yet delivered, can be cancelled.
    For any other order (delivered, already cancelled) nothing changes and the result has
    cancelled=false and a message saying why; a delivered order can be refunded with
    issue_refund instead. Make sure the customer asked for this order to be cancelled before
    calling. Returns cancelled (true or false), order_id, status (after the call),
    previous_status and message. An unknown id gives found=false and a message.
    """
    return _apply_once("cancel_order", lambda connection: _cancel(connection, order_id, reason))


def _cancel(connection: sqlite3.Connection, order_id: int, reason: str) -> dict[str, Any]:
    order = connection.execute(
        "SELECT o.status, o.cancelled_at, t.delivered_at FROM orders o"
        " LEFT JOIN tracking t ON t.order_id = o.id WHERE o.id = ?",
        (order_id,),
    ).fetchone()
    if order is None:
        return {**_order_not_found(order_id), "cancelled": False}
    status = order["status"]
    if status not in CANCELLABLE_STATUSES or order["delivered_at"] is not None:
        if status == "cancelled":
            why = f"it was already cancelled {describe_moment(order['cancelled_at'])}"
        elif order["delivered_at"] is not None:
            why = (
                f"it was delivered {describe_moment(order['delivered_at'])}; "
                "use issue_refund to pay the customer back instead"
            )
        else:
            why = f"its status is {status}"
        return {
            "found": True,
            "cancelled": False,
            "order_id": order_id,
            "status": status,
            "previous_status": status,
            "message": f"order {order_id} was not cancelled: {why}.",
        }
    connection.execute(
        "UPDATE orders SET status = 'cancelled', cancelled_at = ?, cancel_reason = ? WHERE id = ?",
        (_iso(_now()), reason, order_id),
    )
    if status == "shipped":
        connection.execute(
            "UPDATE tracking SET last_event = 'Cancelled; return to sender requested'"
            " WHERE order_id = ?",
            (order_id,),
        )
    note = (
        " The parcel had shipped; the carrier was asked to return it."
        if status == "shipped"
        else ""
    )
    return {
        "found": True,
        "cancelled": True,
        "order_id": order_id,
        "status": "cancelled",
        "previous_status": status,
        "message": f"order {order_id} is cancelled.{note}",
    }


@tool(side_effects=True, compensation=reverse_refund)
def issue_refund(
    order_id: OrderIdArgument,
    amount: Annotated[
        float,
        Field(
            gt=0,
            description=(
                "How much to refund, in the order's currency, e.g. 129.99; rounded to cents. "
                "At most the order's refundable amount (see get_order)."
            ),
        ),
    ],
) -> dict[str, Any]:
    """Refund money on an order to the customer's original payment method. This changes real data:
    the refund is recorded and paid out.

    The amount is in the order's currency, rounded to cents; it must be positive and at most the
    order's total minus earlier refunds (get_order shows this as refundable). A partial refund is
    fine; several refunds on one order add up. When the amount is too large nothing is refunded:
    the result has refunded=false and a message giving the largest amount allowed. Returns
    refunded (true or false), refund_id, order_id, amount, refunded_total (all refunds on the
    order so far) and refundable (what is left). An unknown id gives found=false and a message.
    """
    cents = round(amount * 100)
    return _apply_once("issue_refund", lambda connection: _refund(connection, order_id, cents))


def _refund(connection: sqlite3.Connection, order_id: int, cents: int) -> dict[str, Any]:
    order = connection.execute(
        "SELECT total_cents, currency FROM orders WHERE id = ?", (order_id,)
    ).fetchone()
    if order is None:
        return {**_order_not_found(order_id), "refunded": False}
    currency = order["currency"]
    already = _refunded_cents(connection, order_id)
    remaining = order["total_cents"] - already
    if cents <= 0 or cents > remaining:
        problem = (
            "the amount must be at least 0.01"
            if cents <= 0
            else f"{_amount_text(cents, currency)} is more than the "
            f"{_amount_text(remaining, currency)} still refundable (total "
            f"{_amount_text(order['total_cents'], currency)}, already refunded "
            f"{_amount_text(already, currency)})"
        )
        return {
            "found": True,
            "refunded": False,
            "order_id": order_id,
            "refundable": _money(remaining, currency),
            "message": f"nothing was refunded on order {order_id}: {problem}.",
        }
    cursor = connection.execute(
        "INSERT INTO refunds (order_id, amount_cents, created_at) VALUES (?, ?, ?)",
        (order_id, cents, _iso(_now())),
    )
    refund_id = cursor.lastrowid
    return {
        "found": True,
        "refunded": True,
        "refund_id": refund_id,
        "order_id": order_id,
        "amount": _money(cents, currency),
        "refunded_total": _money(already + cents, currency),
        "refundable": _money(remaining - cents, currency),
    }


@tool(side_effects=True, compensation=send_correction)
def send_email(
    to: Annotated[
        str, Field(description="One recipient email address, e.g. a@b.com. No names, no lists.")
    ],
    subject: Annotated[str, Field(min_length=1, description="The subject line, plain text.")],
    body: Annotated[
        str, Field(min_length=1, description="The complete message, plain text; no attachments.")
    ],
) -> dict[str, Any]:
    """Send an email. This changes real data: the message goes to the outbox for delivery and
    cannot be recalled, so send the final text, not a draft, and send it once.

    Use this to tell a customer what was done (a cancellation, a refund) or to answer them in
    writing. Returns sent=true and outbox_id, the id of the queued message. An address that is
    not a single well-formed email gives sent=false and a message; nothing is queued then.
    """
    address = to.strip()
    if not _EMAIL_PATTERN.fullmatch(address):
        return {
            "sent": False,
            "message": f"not sent: {to!r} is not a single email address like name@example.com.",
        }

    def send(connection: sqlite3.Connection) -> dict[str, Any]:
        cursor = connection.execute(
            "INSERT INTO outbox (to_address, subject, body, created_at) VALUES (?, ?, ?, ?)",
            (address, subject, body, _iso(_now())),
        )
        return {"sent": True, "outbox_id": cursor.lastrowid, "to": address, "subject": subject}

    return _apply_once("send_email", send)
