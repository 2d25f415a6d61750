"""app/datasets/engine/watchdog.py: a statement past its time limit is interrupted, one that ends in
time is left alone, and a call's deadline bounds every statement's limit."""

from __future__ import annotations

import time
from collections.abc import Iterator

import duckdb
import pytest

from app.datasets.engine.watchdog import CALL_DEADLINE, TimedOut, run_with_timeout, time_left

# A join DuckDB interrupts between vectors, far longer than any limit below.
ENDLESS = "SELECT count(*) FROM range(100000) a, range(100000) b WHERE hash(a.range + b.range) = 0"


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    db = duckdb.connect(":memory:", config={"threads": 1})
    yield db
    db.close()


def test_a_statement_that_ends_in_time_is_not_interrupted(con: duckdb.DuckDBPyConnection) -> None:
    value, fired = run_with_timeout(con, 30.0, lambda: con.execute("SELECT 42").fetchone())
    assert value == (42,) and not fired
    # The connection is usable afterwards: no interrupt is left pending for it.
    assert con.execute("SELECT 1").fetchone() == (1,)


def test_a_statement_past_its_limit_is_interrupted(con: duckdb.DuckDBPyConnection) -> None:
    started = time.monotonic()
    with pytest.raises(TimedOut):
        run_with_timeout(con, 0.2, lambda: con.execute(ENDLESS).fetchall())
    assert time.monotonic() - started < 60  # not the join's own length
    assert con.execute("SELECT 1").fetchone() == (1,)


def test_an_interrupt_the_watchdog_did_not_send_is_raised_as_it_is(con: duckdb.DuckDBPyConnection) -> None:
    def interrupted() -> None:
        raise duckdb.InterruptException("someone else's")

    with pytest.raises(duckdb.InterruptException):
        run_with_timeout(con, 30.0, interrupted)


def test_the_calls_deadline_bounds_the_limit() -> None:
    assert time_left(5.0) == 5.0  # outside a worker's call: the statement's own limit
    token = CALL_DEADLINE.set(time.monotonic() + 1000.0)
    try:
        assert time_left(5.0) == 5.0
    finally:
        CALL_DEADLINE.reset(token)
    token = CALL_DEADLINE.set(time.monotonic() + 2.0)
    try:
        assert 0 < time_left(5.0) <= 2.0
    finally:
        CALL_DEADLINE.reset(token)
    token = CALL_DEADLINE.set(time.monotonic() - 1.0)  # already past: interrupted at once
    try:
        assert time_left(5.0) == 0.001
    finally:
        CALL_DEADLINE.reset(token)
