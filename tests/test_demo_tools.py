"""The customer-support demo tools, called directly against a fresh SQLite file per test."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from durable_agent.activities.tools import registered_tools
from durable_agent.demo import tools as demo_tools
from durable_agent.demo.tools import (
    cancel_order,
    connect,
    demo_db_path,
    get_customer,
    get_order,
    get_tracking,
    issue_refund,
    outbox,
    search_orders,
    send_email,
)

SEEDED_AT = datetime(2026, 11, 29, 9, 30, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "nested" / "demo.db"
    monkeypatch.setenv("AGENT_DEMO_DB", str(path))
    monkeypatch.setattr(demo_tools, "_now", lambda: SEEDED_AT)
    return path


def _count(path: Path, sql: str, *params: object) -> int:
    with connect(path) as connection:
        return int(connection.execute(sql, params).fetchone()[0])


def test_path_comes_from_the_environment_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_DEMO_DB", raising=False)
    monkeypatch.chdir(tmp_path)
    assert demo_db_path() == tmp_path / ".agent-demo" / "demo.db"
    monkeypatch.setenv("AGENT_DEMO_DB", str(tmp_path / "elsewhere.db"))
    assert demo_db_path() == tmp_path / "elsewhere.db"


def test_first_use_creates_the_folder_and_seeds(db: Path) -> None:
    assert not db.exists()
    result = search_orders("a@b.com")
    assert db.exists()
    assert result["total_orders"] == 3
    assert [order["id"] for order in result["orders"]] == [1042, 1041, 1040]
    assert _count(db, "SELECT COUNT(*) FROM orders WHERE customer_email = 'bulk@b.com'") == 5000
    assert _count(db, "SELECT COUNT(*) FROM orders WHERE id BETWEEN 1040 AND 1042") == 3
    with connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_search_orders_returns_the_20_newest_and_the_full_count(db: Path) -> None:
    result = search_orders("bulk@b.com")
    assert result["total_orders"] == 5000
    assert result["returned"] == 20
    orders = result["orders"]
    assert len(orders) == 20
    created = [order["created_at"] for order in orders]
    assert created == sorted(created, reverse=True)
    with connect(db) as connection:
        newest = connection.execute(
            "SELECT MAX(created_at) FROM orders WHERE customer_email = 'bulk@b.com'"
        ).fetchone()[0]
    assert created[0] == newest
    assert set(orders[0]) == {"id", "created_at", "status", "total"}
    assert set(orders[0]["total"]) == {"amount", "currency"}


def test_search_orders_matches_email_case_insensitively_but_exactly(db: Path) -> None:
    assert search_orders("  A@B.COM ")["total_orders"] == 3
    missing = search_orders("a@b.co")
    assert missing["found"] is False
    assert "no customer with email" in missing["message"]
    assert "orders" not in missing


def test_get_order_and_unknown_id(db: Path) -> None:
    order = get_order(1042)
    assert order["found"] is True
    assert order["customer_email"] == "a@b.com"
    assert order["status"] == "delivered"
    assert order["total"] == {"amount": 129.99, "currency": "USD"}
    assert order["refundable"] == order["total"]
    assert "headphones" in order["items"].lower()

    missing = get_order(99999)
    assert missing["found"] is False
    assert "no order 99999" in missing["message"]


def test_tracking_of_1042_says_delivered_yesterday_at_1420(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracking = get_tracking(1042)
    assert tracking["status"] == "delivered"
    assert tracking["delivered_at"] == "2026-11-28T14:20:00Z"
    assert tracking["shipped_at"] == "2026-11-27T09:30:00Z"
    assert tracking["carrier"] and tracking["tracking_number"]
    assert tracking["summary"] == "Delivered 2026-11-28 at 14:20 UTC (yesterday)"

    # The relative day is worked out when asked, not stored at seeding.
    monkeypatch.setattr(demo_tools, "_now", lambda: datetime(2026, 12, 1, 8, 0, tzinfo=UTC))
    assert get_tracking(1042)["summary"] == "Delivered 2026-11-28 at 14:20 UTC (3 days ago)"
    assert get_tracking(99999)["found"] is False


def test_tracking_of_an_order_not_shipped_yet(db: Path) -> None:
    newest = search_orders("bulk@b.com")["orders"][0]
    assert newest["status"] == "processing"
    tracking = get_tracking(newest["id"])
    assert tracking["carrier"] is None
    assert tracking["delivered_at"] is None
    assert tracking["summary"].startswith("Not shipped yet")


def test_get_customer(db: Path) -> None:
    customer = get_customer("A@b.com")
    assert customer == {
        "found": True,
        "name": "Ada Byron",
        "email": "a@b.com",
        "member_since": customer["member_since"],
        "order_count": 3,
    }
    assert customer["member_since"] < "2026-11-29"
    assert get_customer("bulk@b.com")["order_count"] == 5000
    assert get_customer("nobody@b.com")["found"] is False


def test_send_email_writes_an_outbox_row(db: Path) -> None:
    assert outbox() == []
    result = send_email("a@b.com", "Your refund", "We refunded order 1042.")
    assert result["sent"] is True
    rows = outbox(db)
    assert [row["id"] for row in rows] == [result["outbox_id"]]
    assert rows[0]["to"] == "a@b.com"
    assert rows[0]["subject"] == "Your refund"
    assert rows[0]["body"] == "We refunded order 1042."

    refused = send_email("Ada Byron", "Hi", "Hello")
    assert refused["sent"] is False
    assert len(outbox()) == 1


def test_cancel_order_cancels_processing_and_refuses_delivered(db: Path) -> None:
    processing = search_orders("bulk@b.com")["orders"][0]["id"]
    result = cancel_order(processing, "customer changed their mind")
    assert result["cancelled"] is True
    assert result["previous_status"] == "processing"
    order = get_order(processing)
    assert order["status"] == "cancelled"
    assert order["cancel_reason"] == "customer changed their mind"
    assert order["cancelled_at"] == "2026-11-29T09:30:00Z"

    again = cancel_order(processing, "twice")
    assert again["cancelled"] is False
    assert "already cancelled" in again["message"]

    delivered = cancel_order(1042, "too late")
    assert delivered["cancelled"] is False
    assert "delivered" in delivered["message"]
    assert "issue_refund" in delivered["message"]
    assert get_order(1042)["status"] == "delivered"

    assert cancel_order(99999, "nope")["found"] is False


def test_cancel_a_shipped_order(db: Path) -> None:
    shipped = next(o for o in search_orders("bulk@b.com")["orders"] if o["status"] == "shipped")
    assert cancel_order(shipped["id"], "lost patience")["cancelled"] is True
    assert get_tracking(shipped["id"])["status"] == "cancelled"


def test_refunds_are_recorded_and_bounded_by_the_order_total(db: Path) -> None:
    first = issue_refund(1042, 100.0)
    assert first["refunded"] is True
    assert first["refundable"] == {"amount": 29.99, "currency": "USD"}

    too_much = issue_refund(1042, 30.0)
    assert too_much["refunded"] is False
    assert "29.99" in too_much["message"]

    assert issue_refund(1042, 0.0)["refunded"] is False
    assert issue_refund(1042, -5.0)["refunded"] is False

    rest = issue_refund(1042, 29.99)
    assert rest["refunded"] is True
    assert rest["refunded_total"] == {"amount": 129.99, "currency": "USD"}
    assert issue_refund(1042, 0.01)["refunded"] is False

    assert _count(db, "SELECT COUNT(*) FROM refunds WHERE order_id = 1042") == 2
    assert _count(db, "SELECT SUM(amount_cents) FROM refunds WHERE order_id = 1042") == 12999
    assert get_order(1042)["refundable"]["amount"] == 0
    assert issue_refund(99999, 1.0)["found"] is False


def test_concurrent_first_use_seeds_exactly_once(db: Path) -> None:
    threads_count = 8
    barrier = threading.Barrier(threads_count)
    errors: list[BaseException] = []
    totals: list[int] = []

    def first_use() -> None:
        try:
            barrier.wait()
            totals.append(search_orders("bulk@b.com")["total_orders"])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=first_use) for _ in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert totals == [5000] * threads_count
    assert _count(db, "SELECT COUNT(*) FROM customers") == 2
    assert _count(db, "SELECT COUNT(*) FROM orders") == 5003
    assert _count(db, "SELECT COUNT(*) FROM tracking WHERE order_id = 1042") == 1


def test_an_unseeded_but_existing_database_gets_seeded(db: Path) -> None:
    db.parent.mkdir(parents=True)
    sqlite3.connect(db).close()  # an empty file, as a crashed first use could leave
    assert get_customer("a@b.com")["order_count"] == 3


def test_search_orders_spec_describes_its_bound_and_its_argument() -> None:
    spec = registered_tools()["search_orders"].spec
    assert spec.side_effects is False
    assert spec.parameters["required"] == ["email"]
    assert spec.parameters["properties"]["email"]["type"] == "string"
    assert spec.parameters["properties"]["email"]["description"]
    assert "20" in spec.description
    assert "case" in spec.description

    specs = registered_tools()
    for name in ("cancel_order", "issue_refund", "send_email"):
        assert specs[name].spec.side_effects is True
        assert "changes real data" in specs[name].spec.description
    assert specs["get_order"].spec.parameters["properties"]["order_id"]["type"] == "integer"
