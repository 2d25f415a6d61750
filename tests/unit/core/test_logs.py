"""Log lines: JSON for machines, readable text on a terminal, both with the request id and fields."""

from __future__ import annotations

import json
import logging

from app.core.logs import JsonFormatter, TextFormatter, request_id_var


def _record() -> logging.LogRecord:
    record = logging.LogRecord("cairn.call", logging.INFO, __file__, 1, "call", (), None)
    record.operation, record.ms = "push", 3.5
    return record


def test_json_and_text_lines_carry_the_same_fields() -> None:
    token = request_id_var.set("abc123")
    try:
        payload = json.loads(JsonFormatter().format(_record()))
        text = TextFormatter().format(_record())
    finally:
        request_id_var.reset(token)
    assert payload["msg"] == "call" and payload["operation"] == "push" and payload["request_id"] == "abc123"
    assert text.split(" ", 1)[1] == "INFO    cairn.call: call  request_id=abc123 operation=push ms=3.5"
