"""The token budget: every response is measured with the embedding model's WordPiece tokenizer
(`app.core.tokens.count_tokens`, all-MiniLM-L6-v2) on its compact JSON form, and degraded until it
fits.

Degradation ladder for row results (`degradation` in the response):
1. `none` — every requested row fits.
2. `fewer_rows` — at least half of the requested rows fit on their own: the largest prefix that fits.
3. `rows_and_summary` — as many rows as fit next to a per-column summary of the remaining rows.
4. `summary_only` — only the summary (of all rows) fits; columns are dropped from it if needed.
5. `minimal` — not even that: the envelope alone, `truncated` set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from app.core.tokens import count_tokens, get_tokenizer

TOKENIZER = "all-MiniLM-L6-v2 WordPiece (app.core.tokens.count_tokens)"


def dumps(data: Any) -> str:
    """The compact JSON the transports send."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def tokens_of(data: Any) -> int:
    """Tokens of `data` as compact JSON. A chart's PNG bytes are not text for the model (they are
    meant to travel as image content) and are bounded by their own byte budget, so the base64 string
    is counted as one placeholder."""
    viz = data.get("visualization") if isinstance(data, dict) else None
    if isinstance(viz, dict) and viz.get("base64_image"):
        data = {**data, "visualization": {**viz, "base64_image": "<png>"}}
    return count_tokens(dumps(data))


def finalize(payload: dict[str, Any], field: str = "context_tokens_used") -> dict[str, Any]:
    """Set `field` to the token count of the payload including that field itself.

    JSON punctuation around a number is tokenised on its own, so the count with the real value is the
    count with a one-token placeholder plus the tokens of the value's digits, minus one."""
    payload[field] = 0
    base = tokens_of(payload)
    value = base
    for _ in range(4):
        nxt = base - 1 + count_tokens(str(value))
        if nxt == value:
            break
        value = nxt
    payload[field] = value
    return payload


def item_tokens(items: list[Any]) -> list[int]:
    """Tokens of each item as compact JSON (batched)."""
    if not items:
        return []
    tokenizer = get_tokenizer()
    return [len(e.ids) for e in tokenizer.encode_batch([dumps(i) for i in items], add_special_tokens=False)]


def largest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """Largest k in 0..n with fits(k) (fits is monotone: true up to some k)."""
    lo, hi = 0, n
    if fits(n):
        return n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def shrink_summary(summary: dict[str, Any], fits: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """Drop columns from a summary until it fits; None when even an empty one does not."""
    cols = dict(summary.get("columns", {}))
    names = list(cols)
    while True:
        trimmed = {**summary, "columns": {k: cols[k] for k in names}}
        if len(names) < len(cols):
            trimmed["columns_omitted"] = len(cols) - len(names) + int(summary.get("columns_omitted", 0))
        if fits(trimmed):
            return trimmed
        if not names:
            return None
        names = names[: max(0, len(names) // 2 if len(names) > 4 else len(names) - 1)]


def fit_rows(
    envelope: Callable[[list[Any], dict[str, Any] | None, str], dict[str, Any]],
    rows: list[Any],
    budget: int,
    summarize_rest: Callable[[int], dict[str, Any]],
) -> tuple[dict[str, Any], int, str]:
    """Build the largest response within `budget` tokens following the ladder above.

    `envelope(rows, summary, degradation)` builds a full response. Returns (payload, rows_kept, level).
    Row counts are chosen from per-row token counts (a list's tokens are its items' tokens plus one
    comma between items), then the chosen payload is counted exactly and trimmed if needed."""
    per_row = item_tokens(rows)
    prefix = [0]
    for t in per_row:
        prefix.append(prefix[-1] + t)

    def best(summary: dict[str, Any] | None, level: str, cap: int) -> tuple[int, dict[str, Any] | None]:
        base = tokens_of(finalize(envelope([], summary, level)))
        k = 0
        for m in range(cap, -1, -1):
            if base + prefix[m] + max(0, m - 1) + 2 <= budget:
                k = m
                break
        while k >= 0:
            payload = finalize(envelope(rows[:k], summary, level))
            if payload["context_tokens_used"] <= budget:
                return k, payload
            k -= 1
        return -1, None

    n = len(rows)
    full = finalize(envelope(rows, None, "none"))
    if full["context_tokens_used"] <= budget:
        return full, n, "none"
    k, payload = best(None, "fewer_rows", n)
    if payload is not None and k >= max(1, (n + 1) // 2):
        return payload, k, "fewer_rows"
    # Rows plus a summary of the rest: size the summary for about k rows, then fix it for the final k.
    guess = summarize_rest(max(k, 1))
    k2, _ = best(guess, "rows_and_summary", max(k, 1))
    while k2 >= 1:
        rest = summarize_rest(k2)
        k3, payload = best(rest, "rows_and_summary", k2)
        if payload is not None and k3 == k2:
            return payload, k2, "rows_and_summary"
        k2 = k3
    whole = summarize_rest(0)
    trimmed = shrink_summary(whole, lambda s: tokens_of(finalize(envelope([], s, "summary_only"))) <= budget)
    if trimmed is not None:
        return finalize(envelope([], trimmed, "summary_only")), 0, "summary_only"
    return finalize(envelope([], None, "minimal")), 0, "minimal"
