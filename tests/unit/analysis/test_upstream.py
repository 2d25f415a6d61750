"""app/analysis/upstream.py (pure parts), without a server."""

from __future__ import annotations

import json

from app.analysis.repository import _json
from app.analysis.upstream import Shaper, retry_after_seconds, stored_name


def test_retry_after_and_nul_bytes() -> None:
    assert retry_after_seconds("3") == 3.0 and retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 0 <= (retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") or 0) <= 1
    assert json.loads(_json({"a": "x\x00y", "b": "\\u0000"})) == {"a": "xy", "b": "\\u0000"}


def test_stored_names_follow_one_rule() -> None:
    assert stored_name("sla-tier") == "sla_tier" and stored_name("team name") == "team_name"
    assert stored_name("plain_key") == "plain_key" and stored_name("-x-") == "x"
    assert stored_name("2fa") == "f_2fa" and stored_name("---") == "f" and len(stored_name("a" * 100)) == 64


def test_shaper_depth_renames_collisions_and_epochs() -> None:
    record = {
        "id": "T-1",
        "custom_fields": {"sla-tier": "gold", "team name": "core"},
        "requester": {"org": {"tier": "gold", "meta": {"deep": 1}}},
        "a-b": 1,
        "a_b": 2,
        "author_id": 7,
        "author": {"id": 7, "_links": {}},
        "created": 1_740_787_200,
        "updated": "1740787200500",
    }
    shaper = Shaper(
        depth=2,
        rename={"custom_fields.team name": "team"},
        epoch={"created": ("epoch_seconds", False), "updated": ("epoch_millis", False)},
    )
    row = shaper(record)
    assert row == {
        "id": "T-1",
        "custom_fields_sla_tier": "gold",
        "team": "core",
        "requester_org_tier": "gold",
        "requester_org_meta": {"deep": 1},  # deeper than flatten_depth: kept whole
        "a_b": 1,
        "a_b_2": 2,  # a second key with the same stored name and another value
        "author_id": 7,  # author.id has the same name and value: kept once
        "created": "2025-03-01T00:00:00Z",
        "updated": "2025-03-01T00:00:00.500Z",
    }
    assert shaper.names["custom_fields.sla-tier"] == "custom_fields_sla_tier"
    assert shaper.names["a_b"] == "a_b_2" and "id" not in shaper.names
    assert "requester.org.tier" not in shaper.names  # plain flattening is not listed
    assert Shaper(depth=0)({"x-y": {"z": 1}}) == {"x_y": {"z": 1}}
    assert Shaper(epoch={"d": ("epoch_seconds", True)})({"d": 86_400 * 365, "e": "n/a"})["d"] == "1971-01-01"
    assert Shaper(epoch={"d": ("epoch_seconds", False)})({"d": "not a number"}) == {"d": "not a number"}
