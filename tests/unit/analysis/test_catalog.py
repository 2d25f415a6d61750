"""app/analysis/catalog.py (pure parts), without a server."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.analysis.catalog import load_catalog, parse_catalog
from app.analysis.config import DEMO_REGISTRY
from app.core.errors import InvalidInput, NotFound, SchemaError


def test_registry_validation() -> None:
    with pytest.raises(SchemaError, match="must contain"):
        parse_catalog(
            "upstreams: {u: {base_url: 'http://x', models: {m: {list_path: /m, writable: true, "
            "update: {method: PATCH, path: /m}}}}}"
        )
    with pytest.raises(SchemaError, match="declared by both"):
        parse_catalog(
            "upstreams: {a: {base_url: 'http://x', models: {m: {list_path: /m}}}, "
            "b: {base_url: 'http://y', models: {m: {list_path: /m}}}}"
        )
    with pytest.raises(SchemaError, match="not valid YAML"):
        parse_catalog("upstreams: [")
    with pytest.raises(SchemaError, match="colour"):
        parse_catalog("upstreams: {a: {base_url: 'http://x', colour: red, models: {}}}")
    reg = load_catalog(DEMO_REGISTRY)
    assert reg.child_model_name("book", "sessions") == "reading_session"
    assert "device" in reg.attributes_of("reading_session")


def test_shape_settings_are_validated() -> None:
    base = "upstreams: {u: {base_url: 'http://x', models: {m: {list_path: /m, %s}}}}"
    with pytest.raises(SchemaError, match="format applies to date"):
        parse_catalog(base % "attributes: {n: {type: integer, format: epoch_seconds}}")
    with pytest.raises(SchemaError, match="rename target"):
        parse_catalog(base % "rename: {'a.b-c': 'not-a-name'}")
    with pytest.raises(SchemaError, match="flatten_depth"):
        parse_catalog(base % "flatten_depth: 9")
    cfg = parse_catalog(base % "flatten: false, pagination: {has_more_path: meta.more}").model("m").cfg
    assert cfg.flatten_depth == 0 and cfg.pagination.has_more_path == "meta.more"


def test_child_write_settings_and_writable_model() -> None:
    child = (
        "upstreams: {u: {base_url: 'http://x', models: {t: {list_path: /t, children: {comments: "
        "{path: '/t/{parent_id}/comments', %s}}}}}}"
    )
    with pytest.raises(SchemaError, match="needs an update or a delete"):
        parse_catalog(child % "writable: true")
    reg = parse_catalog(
        child % "model: ticket_comment, writable: true, update: {method: PATCH, path: '/t/{parent_id}/c/{id}'}"
    )
    wm = reg.writable_model("ticket_comment")
    assert wm.parent_model == "t" and wm.parent_key == "t_id" and wm.cfg.writable and wm.cfg.update is not None
    assert reg.writable_model("t").parent_model is None
    with pytest.raises(NotFound) as missing:
        reg.writable_model("comments")  # stored under its model name
    assert "ticket_comment" in " ".join(missing.value.suggestions)


def test_credential_sources(tmp_path: Path) -> None:
    base = "upstreams: {u: {base_url: 'http://x', auth: {%s}, models: {m: {list_path: /m}}}}"
    with pytest.raises(SchemaError, match="exactly one of value, value_env or value_file"):
        parse_catalog(base % "value: a, value_file: /b")
    secret = tmp_path / "token"
    auth = parse_catalog(base % f"value_file: '{secret}'").cfg.upstreams["u"].auth
    assert auth is not None
    with pytest.raises(SchemaError) as unreadable:
        auth.header_value()
    assert str(tmp_path) not in unreadable.value.message
    secret.write_text("first\n")
    assert auth.header_value() == "Bearer first"
    secret.write_text("second")  # read at each use
    assert auth.header_value() == "Bearer second"
    secret.write_text("a\nb")
    with pytest.raises(SchemaError, match="cannot carry") as bad:
        auth.header_value()
    assert "a\nb" not in bad.value.message


def test_registry_errors_name_no_path(tmp_path: Path) -> None:
    source = str(tmp_path / "private" / "upstreams.yaml")
    for text in ("upstreams: [", "upstreams: {a: {base_url: 'ftp://x', models: {}}}"):
        with pytest.raises(SchemaError) as err:
            parse_catalog(text, source)
        assert source not in err.value.message and "private" not in err.value.message
    with pytest.raises(SchemaError) as unread:
        load_catalog(tmp_path / "missing.yaml")
    assert str(tmp_path) not in unread.value.message


def test_no_registry_configured_says_which_setting_names_it() -> None:
    with pytest.raises(InvalidInput) as err:
        load_catalog(None)
    assert "CAIRN_ANALYSIS_UPSTREAMS" in err.value.suggestions[0]
