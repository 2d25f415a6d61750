"""app/datasets/engine/dates.py: the formats a text column's dates are written in, each value counted
once, and the SQL that parses them all."""

from __future__ import annotations

import duckdb

from app.datasets.engine import dates


def masks_of(values: list[str]) -> dict[int, int]:
    """The histogram of masks `dates.mask_sql` gives `values` (as profiling computes it)."""
    with duckdb.connect() as con:
        rows = con.execute(
            f"SELECT {dates.mask_sql('t')} AS m, count(*) FROM unnest(?) AS u(t) GROUP BY m", [values]
        ).fetchall()
    return {int(m): int(n) for m, n in rows}


def test_three_formats_get_their_shares_each_value_counted_once() -> None:
    values = ["2025-03-14"] * 5 + ["14/03/2025", "03/04/2025", "25/12/2025"] + ["Mar 14, 2025", "May 3, 2025"]
    masks = masks_of(values)
    picked, dated = dates.formats_of(masks)
    # 03/04/2025 reads both ways; the day-first format reads more of the column and takes it; "May 3,
    # 2025" reads abbreviated and full, and goes with the abbreviated format, which reads more.
    assert picked == [("%Y-%m-%d", 5), ("%d/%m/%Y", 3), ("%b %d, %Y", 2)] and dated == 10
    assert dates.shares(masks, 10) == {"%Y-%m-%d": 0.5, "%d/%m/%Y": 0.3, "%b %d, %Y": 0.2}
    advice = dates.advice("order_date", masks, 10, None)
    assert advice == (
        "'order_date' mixes 3 date formats (%Y-%m-%d 50%, %d/%m/%Y 30%, %b %d, %Y 20%): "
        "try_strptime(order_date, ['%Y-%m-%d', '%d/%m/%Y', '%b %d, %Y'])"
    )
    with duckdb.connect() as con:  # the SQL given reads every value
        sql = advice.split(": ", 1)[1].replace("order_date", "t")
        assert con.execute(f"SELECT count({sql}) FROM unnest(?) AS u(t)", [values]).fetchone() == (10,)


def test_one_format_other_text_and_ambiguity_are_said() -> None:
    assert dates.advice("day", masks_of(["2025-01-02", "2025-01-03"]), 2, None) == (
        "'day' holds dates as text (%Y-%m-%d): strptime(day, '%Y-%m-%d')"
    )
    some = masks_of(["2025-01-02", "2025-01-03", "2025-01-04", "unknown"])
    assert dates.advice("day", some, 4, "unknown") == (
        "'day' holds dates as text (%Y-%m-%d) with 25% other text (e.g. 'unknown'): "
        "try_strptime(day, '%Y-%m-%d') nulls those"
    )
    both_ways = masks_of(["01/02/2025", "03/04/2025"])
    assert "day and month cannot be told apart" in str(dates.advice("d", both_ways, 2, None))
    assert dates.advice("note", masks_of(["a", "b", "2025-01-02"]), 3, "a") is None  # mostly not dates
    assert dates.shares(masks_of(["a", "b", "2025-01-02"]), 3) == {}


def test_a_column_name_is_quoted_only_when_it_must_be() -> None:
    assert dates.column_sql("order_date") == "order_date"
    assert dates.column_sql("order") == '"order"'  # a reserved word
    assert dates.column_sql("Order Date") == '"Order Date"'
