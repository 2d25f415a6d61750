"""app/datasets/engine/nested.py: the inner fields of struct and list columns, by path, and the queries
that read them as columns."""

from __future__ import annotations

import duckdb

from app.datasets.engine import nested

ROW = "{'id': 29, 'address': {'city': '東京'}, 'orders': [{'sku': 'a', 'qty': 2}, {'sku': 'b', 'qty': 3}]}"


def test_paths_of_structs_and_lists_and_the_queries_that_read_them() -> None:
    with duckdb.connect() as con:
        con.execute(f"CREATE TABLE t AS SELECT {ROW} AS customer, ['x', 'y'] AS tags, 1 AS n")
        rel = con.sql("SELECT * FROM t")
        types = dict(zip(rel.columns, rel.types, strict=True))
        assert [nested.is_nested(types[c]) for c in ("customer", "tags", "n")] == [True, True, False]
        assert [leaf.path for leaf in nested.leaves("customer", types["customer"])] == [
            "customer.id",
            "customer.address.city",
            "customer.orders[].sku",
            "customer.orders[].qty",
        ]
        assert nested.leaves("n", types["n"]) == []
        read = [con.execute(q).fetchall() for q in nested.flat_queries("t", "customer", types["customer"])]
        assert read == [[(29, "東京")], [("a", 2), ("b", 3)]]
        assert con.execute(nested.flat_queries("t", "tags", types["tags"])[0]).fetchall() == [("x",), ("y",)]
        names = [d[0] for d in con.execute(nested.flat_queries("t", "tags", types["tags"])[0]).description]
        assert names == ["tags[]"]


def test_json_text_is_shown_parsed_and_counted_by_kind() -> None:
    assert nested.parsed('{"id": 29}') == {"id": 29} and nested.parsed('"plain"') == "plain"
    assert nested.parsed('{"cut": "sho') == '{"cut": "sho' and nested.parsed(None) is None
    texts = ['{"a": 1}', '{"b": 2}', '"x"', "[1]", "3.5", "null", None, '{"cut": "sho']
    assert nested.json_kinds(texts) == {"object": 2, "string": 1, "array": 1, "number": 1, "null": 1, "text": 1}
