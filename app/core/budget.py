"""The one token budget: what a reply costs the agent, measured on exactly what the MCP transport
sends, and the ladder every family uses to fit a reply under a limit.

Unit: tokens of the embedding model's WordPiece tokenizer (`app.core.embeddings.tokens.count_tokens`,
all-MiniLM-L6-v2), counted on the reply's compact JSON text (`dumps`) — the text content of the MCP
tool result. Base64 images named in a result model's `mcp_image_fields` travel as MCP image content,
not text, so `sent_text` replaces them with the same placeholder the adapter sends.

Degradation ladder for row results (`fit_rows`; the level is reported as `degradation`):
1. `none` — every requested row fits.
2. `fewer_rows` — at least half of the requested rows fit on their own: the largest prefix that fits.
3. `rows_and_summary` — as many rows as fit next to a per-column summary of the remaining rows.
4. `summary_only` — only the summary (of all rows) fits; columns are dropped from it if needed.
5. `minimal` — not even that: the envelope alone, `truncated` set.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from app.core.embeddings.tokens import count_tokens

Payload = dict[str, Any]
M = TypeVar("M", bound=BaseModel)


def dumps(data: Any) -> str:
    """The compact JSON text the transports send (no spaces, UTF-8 kept, other types as str)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


def image_placeholder(n: int) -> str:
    """What the text content holds where the `n`-th (1-based) image was taken out."""
    return f"<sent as image content #{n}>"


def sent_text(data: Any, image_fields: Sequence[str] = ()) -> tuple[Any, list[tuple[str, str]]]:
    """The part of `data` sent as text, and the images taken out of it as `(base64, mime type)`.

    `image_fields` are dotted paths (e.g. `visualization.base64_image`); the mime type comes from a
    sibling `mime_type` (default PNG). `data` itself is not changed."""
    if not image_fields or not isinstance(data, dict):
        return data, []
    text = copy.deepcopy(data)
    images: list[tuple[str, str]] = []
    for path in image_fields:
        *parents, leaf = path.split(".")
        node: Any = text
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(leaf), str) and node[leaf]:
            images.append((node[leaf], node.get("mime_type") or "image/png"))
            node[leaf] = image_placeholder(len(images))
    return text, images


def tokens_of(data: Any, image_fields: Sequence[str] = ()) -> int:
    """Tokens of the text the MCP transport sends for `data`."""
    return count_tokens(dumps(sent_text(data, image_fields)[0]))


def finalize(payload: Payload, field: str = "context_tokens_used", image_fields: Sequence[str] = ()) -> Payload:
    """Set `field` to the token count of the payload including that field itself, counting the payload
    once.

    The tokenizer splits text at whitespace and punctuation before it cuts words into pieces, and a
    JSON number sits between a ':' and a ',' or '}': the payload with value `v` has exactly the tokens
    of the payload with the one-token placeholder 0, minus one, plus the tokens of `v`'s digits. The
    value is the fixed point of that count. Some payloads have none (with 359 in the field the payload
    counts 360 tokens, with 360 it counts 359); the field then says one token less than was sent,
    never more (a budget it reports as kept is kept)."""
    payload[field] = 0
    base = tokens_of(payload, image_fields)

    def sent_with(value: int) -> int:
        return base - 1 + count_tokens(str(value))

    value = base
    for _ in range(4):
        nxt = sent_with(value)
        if nxt == value:
            break
        value = nxt
    for _ in range(4):
        actual = sent_with(value)
        if actual >= value:
            break
        value = actual
    payload[field] = value
    return payload


def image_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """The dotted paths of base64 images a result model sends as MCP image content."""
    fields: tuple[str, ...] = getattr(model, "mcp_image_fields", ())
    return fields


def measured(out: M, field: str = "tokens") -> M:
    """`out` with `field` set to the tokens of `out` as the MCP transport sends it (`field` included)."""
    data = out.model_dump(mode="json", by_alias=True)
    setattr(out, field, finalize(data, field, image_fields(type(out)))[field])
    return out


def item_tokens(items: Sequence[Any]) -> list[int]:
    """Tokens of each item as compact JSON."""
    return [count_tokens(dumps(i)) for i in items]


def largest_fitting(n: int, fits: Callable[[int], bool]) -> int:
    """Largest k in 0..n with fits(k), for a monotone `fits` (true up to some k), by bisection."""
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


def shrink_summary(summary: Payload, fits: Callable[[Payload], bool]) -> Payload | None:
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


Envelope = Callable[[list[Any], Payload | None, str], Payload]


def fit_rows(
    envelope: Envelope,
    rows: list[Any],
    budget: int,
    summarize_rest: Callable[[int], Payload],
    image_fields: Sequence[str] = (),
    sent: Sequence[Any] | None = None,
    estimate_rest: Callable[[int], Payload] | None = None,
) -> tuple[Payload, int, str]:
    """Build the largest response within `budget` tokens following the ladder above.

    `envelope(rows, summary, degradation)` builds a full response. Returns (payload, rows_kept, level).
    `estimate_rest(k)`: a cheaper stand-in for `summarize_rest(k)` of about its size, used only to size
    the first try of rows plus a summary (the summary sent is always `summarize_rest`'s).
    `sent`: what each row is sent as when the envelope renders rows otherwise (e.g. a CSV line per row);
    by default the rows themselves. Row counts are chosen from per-row token counts (a list's tokens
    are its items' tokens plus one comma between items); the chosen payload is then counted exactly,
    trimmed while it is over the budget and grown while rows are left and the count says more fit."""
    prefix = [0]

    def estimate(base: int, cap: int) -> int:
        for m in range(cap, -1, -1):
            if base + prefix[m] + max(0, m - 1) + 2 <= budget:
                return m
        return 0

    def best(summary: Payload | None, level: str, cap: int) -> tuple[int, Payload | None]:
        base = tokens_of(finalize(envelope([], summary, level), image_fields=image_fields), image_fields)
        k = estimate(base, cap)
        while k >= 0:
            payload = finalize(envelope(rows[:k], summary, level), image_fields=image_fields)
            if payload["context_tokens_used"] <= budget:
                break
            k -= 1
        else:
            return -1, None
        # An estimate that left room: the rows the exact count's slack is worth, if they fit.
        for _ in range(6):
            if k >= cap:
                break
            used = payload["context_tokens_used"]
            more = k
            while more < cap and used + prefix[more + 1] - prefix[k] + (more + 1 - k) <= budget:
                more += 1
            if more == k:
                break
            trial = finalize(envelope(rows[:more], summary, level), image_fields=image_fields)
            if trial["context_tokens_used"] > budget:
                break
            k, payload = more, trial
        return k, payload

    n = len(rows)
    full = finalize(envelope(rows, None, "none"), image_fields=image_fields)
    if full["context_tokens_used"] <= budget:
        return full, n, "none"
    for t in item_tokens(rows if sent is None else sent):
        prefix.append(prefix[-1] + t)
    k, payload = best(None, "fewer_rows", n)
    if payload is not None and k >= max(1, (n + 1) // 2):
        return payload, k, "fewer_rows"
    # Rows plus a summary of the rest: size the summary for about k rows, then fix it for the final k.
    guess = (estimate_rest or summarize_rest)(max(k, 1))
    k2, _ = best(guess, "rows_and_summary", max(k, 1))
    while k2 >= 1:
        rest = summarize_rest(k2)
        k3, payload = best(rest, "rows_and_summary", k2)
        if payload is not None and k3 == k2:
            return payload, k2, "rows_and_summary"
        k2 = k3
    whole = summarize_rest(0)
    trimmed = shrink_summary(
        whole,
        lambda s: (
            tokens_of(finalize(envelope([], s, "summary_only"), image_fields=image_fields), image_fields) <= budget
        ),
    )
    if trimmed is not None:
        return finalize(envelope([], trimmed, "summary_only"), image_fields=image_fields), 0, "summary_only"
    return finalize(envelope([], None, "minimal"), image_fields=image_fields), 0, "minimal"
