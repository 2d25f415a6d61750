"""Validation of caller-supplied names and conditions, before anything reaches SQL.

Field names must match the seed's `^[a-zA-Z_][a-zA-Z0-9_]*$` and intervals
`^\\d+\\s+(day|days|week|weeks|month|months|hour|hours|minute|minutes)$`; values are always bound
parameters, never text in a statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from app.core.errors import InvalidInput, invalid_field

FIELD = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
INTERVAL = re.compile(r"^\d+\s+(day|days|week|weeks|month|months|hour|hours|minute|minutes)$")
RANGE_OPS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
MAX_CONDITIONS = 20


def field_name(value: str, where: str) -> str:
    """`value` if it is a safe field name, else a 4001 naming the argument."""
    if not isinstance(value, str) or len(value) > 64 or not FIELD.fullmatch(value):
        raise invalid_field(
            where,
            f"Invalid field name in {where}: {str(value)[:80]!r} (must match {FIELD.pattern})",
            suggestions=[
                "Stored field names use letters, digits and _ only: an upstream key such as 'sla-tier' is stored as "
                "'sla_tier' and 'requester.org' as 'requester_org'; analysis_query mode describe lists them"
            ],
        )
    return value


def interval(value: str, where: str) -> str:
    """A validated interval text such as '7 days'."""
    text = value.strip() if isinstance(value, str) else ""
    if not INTERVAL.fullmatch(text):
        raise invalid_field(
            where, f"Invalid interval in {where}: {str(value)[:80]!r} (e.g. '7 days', '1 week', '6 hours')"
        )
    return text


def parse_date(value: str, where: str) -> datetime:
    """An ISO date or timestamp (naive values are taken as UTC)."""
    try:
        parsed = datetime.fromisoformat(value.strip())
    except (ValueError, AttributeError):
        raise invalid_field(where, f"{where}: {str(value)[:60]!r} is not an ISO date or timestamp") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass
class RangeCond:
    """`field op value` with the cast inferred from the value."""

    field: str
    op: str
    kind: str  # "numeric" | "timestamptz"
    value: Decimal | datetime


@dataclass
class Where:
    """A validated `where`: exact matches (JSONB containment) plus range conditions."""

    exact: dict[str, Any] = field(default_factory=dict)
    ranges: list[RangeCond] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing is filtered."""
        return not self.exact and not self.ranges


def parse_where(raw: dict[str, Any] | None, arg: str = "where") -> Where:
    """Validate a `where` object: `{"f": value}` or `{"f": {"$gte": 1, "$lt": 5}}`."""
    result = Where()
    if not raw:
        return result
    if len(raw) > MAX_CONDITIONS:
        raise InvalidInput(f"{arg}: at most {MAX_CONDITIONS} fields")
    for name, cond in raw.items():
        field_name(name, f"{arg}.{name}")
        if isinstance(cond, dict) and cond and all(isinstance(k, str) and k.startswith("$") for k in cond):
            for op, value in cond.items():
                where = f"{arg}.{name}.{op}"
                if op not in RANGE_OPS:
                    raise invalid_field(
                        where,
                        f"Unknown operator {op!r} in {arg}.{name}",
                        suggestions=["Operators: $gt, $gte, $lt, $lte; plain values match exactly"],
                    )
                if isinstance(value, bool) or value is None:
                    raise invalid_field(where, f"{where}: range values must be numbers or ISO dates")
                if isinstance(value, int | float):
                    result.ranges.append(RangeCond(name, RANGE_OPS[op], "numeric", Decimal(str(value))))
                elif isinstance(value, str):
                    result.ranges.append(RangeCond(name, RANGE_OPS[op], "timestamptz", parse_date(value, where)))
                else:
                    raise invalid_field(where, f"{where}: range values must be numbers or ISO dates")
        elif isinstance(cond, dict) and any(isinstance(k, str) and k.startswith("$") for k in cond):
            raise invalid_field(f"{arg}.{name}", f"{arg}.{name}: do not mix operators and plain keys")
        else:
            result.exact[name] = cond
    return result


def bucket_interval(text: str) -> str:
    """A date_bin stride: months are approximated as 30 days (date_bin refuses month strides)."""
    count, unit = text.split()
    if unit.startswith("month"):
        return f"{int(count) * 30} days"
    return text
