"""Read-only calls served by a real streaming standby (tests/support/standby.py) of the primary a
`cairn serve` host writes to: routing is proven by pausing the standby's replay, which makes what it
serves visibly older than the primary; a caller reads its own writes meanwhile; graph search's write
part and the audit rows of reads land on the primary; a stopped standby costs no call."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.hosts import Host
from tests.support.server import ADMIN_KEY, READ_KEY, STATIC_KEYS, WRITE_KEY
from tests.support.standby import Standby, primary_with_standby
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.slow  # a primary, its standby and a server process: seconds

PROJECT = "replicated"


@pytest.fixture(scope="module")
def standby() -> Iterator[Standby]:
    root = Path(tempfile.mkdtemp(prefix="cairn-primary-"))
    try:
        with primary_with_standby(root) as made:
            yield made
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _env(standby: Standby, max_lag: float) -> dict[str, str]:
    return {
        "CAIRN_DATABASE_URL": standby.primary.url(),
        "CAIRN_DATABASE_REPLICA_URLS": standby.url(),
        "CAIRN_DATABASE_REPLICA_MAX_LAG_SECONDS": str(max_lag),
        "CAIRN_DATABASE_REPLICA_PROBE_SECONDS": "0.2",
        "CAIRN_API_KEYS": ",".join(STATIC_KEYS),
        "CAIRN_FEATURES": "graph",
    }


@pytest.fixture(scope="module")
def host(standby: Standby) -> Iterator[Host]:
    # a generous lag bound: replay is paused for a while below, and the standby must still count as usable
    started = Host.start(_env(standby, 120))
    try:
        yield started
    finally:
        started.stop()
        log = started.log(100_000)
        assert "wrote on a read replica" not in log, log[-4000:]


def _call(host: Host, key: str, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, f"{host.api}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=60, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def _create(host: Host, name: str, observation: str) -> None:
    body = {"project": PROJECT, "entities": [{"name": name, "entityType": "Note", "observations": [observation]}]}
    _call(host, WRITE_KEY, "POST", "/graph/entities", json=body)


def _names(host: Host, key: str) -> set[str]:
    out = _call(host, key, "GET", "/graph", params={"project": PROJECT, "limit": 200})
    return {e["name"] for e in out["entities"]}


def _replicated(standby: Standby, host: Host, name: str) -> None:
    """Wait until the reader (whose reads the standby serves) sees `name`."""
    standby.wait_caught_up(60)
    eventually_sync(lambda: name in _names(host, READ_KEY), timeout=60, interval=0.1, what=f"{name} on the reader")


def test_reads_are_served_by_the_standby_and_a_writer_reads_its_writes(standby: Standby, host: Host) -> None:
    _create(host, "alpha", "first note on the primary")
    _replicated(standby, host, "alpha")
    standby.pause_replay()
    try:
        _create(host, "beta", "written while the standby's replay is paused")
        # the writer's next reads go to the primary: its write is there, not yet on the standby
        assert {"alpha", "beta"} <= _names(host, WRITE_KEY)
        assert standby.sql("SELECT count(*) FROM graph_entities WHERE name = 'beta'") == "0"
        # another key's reads are served by the standby, which has not replayed beta: on the primary
        # they would see it
        for _ in range(5):
            seen = _names(host, READ_KEY)
            assert "alpha" in seen and "beta" not in seen
        assert "beta" in _names(host, WRITE_KEY)  # still the primary: the standby cannot catch up meanwhile
    finally:
        standby.resume_replay()
    _replicated(standby, host, "beta")
    # once the standby has replayed past the write, the writer's reads may go there again: both agree
    assert _names(host, WRITE_KEY) == _names(host, READ_KEY)
    metrics = httpx.get(f"{host.url}/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30).text
    assert _sample(metrics, 'cairn_replica_reads_total{target="replica"}') >= 5
    assert _sample(metrics, 'cairn_replica_reads_total{target="primary"}') >= 2  # the writer's reads
    assert 0 <= _sample(metrics, "cairn_replica_caught_up_age_seconds{") < 120


def _sample(metrics: str, prefix: str) -> float:
    """The value of the first sample line of `metrics` that starts with `prefix`."""
    line = next(line for line in metrics.splitlines() if line.startswith(prefix))
    return float(line.rsplit(" ", 1)[1])


def test_graph_search_on_the_standby_records_its_events_on_the_primary(standby: Standby, host: Host) -> None:
    _create(host, "gamma", "lighthouse keeper journal")
    _replicated(standby, host, "gamma")
    standby.pause_replay()
    try:
        _create(host, "delta", "lighthouse keeper second journal")
        out = _call(host, READ_KEY, "POST", "/graph/search/semantic", json={"project": PROJECT, "query": "lighthouse"})
        found = [hit["name"] for hit in out["results"]]
        assert "gamma" in found and "delta" not in found  # served by the paused standby
        event = out["event_id"]
        assert event > 0
        primary = standby.primary_sql
        assert primary(f"SELECT count(*) FROM graph_search_events WHERE event_id = {event}") == "1"
        assert primary(f"SELECT count(*) FROM graph_search_results WHERE event_id = {event}") == str(len(found))
        assert standby.sql(f"SELECT count(*) FROM graph_search_events WHERE event_id = {event}") == "0"
        # opening a result is implicit feedback on that event: written on the primary as well
        _call(host, READ_KEY, "POST", "/graph/nodes/open", json={"project": PROJECT, "names": ["gamma"]})
        assert primary(f"SELECT count(*) FROM graph_implicit_feedback WHERE event_id = {event}") == "1"
    finally:
        standby.resume_replay()


def test_audited_reads_on_the_standby_write_their_audit_rows_on_the_primary(standby: Standby, host: Host) -> None:
    before = int(standby.primary_sql("SELECT count(*) FROM audit_log WHERE operation = 'audit_log'"))
    for _ in range(3):
        _call(host, ADMIN_KEY, "GET", "/audit", params={"limit": 5})
    assert int(standby.primary_sql("SELECT count(*) FROM audit_log WHERE operation = 'audit_log'")) == before + 3


def test_reads_succeed_while_the_standby_is_down(standby: Standby, host: Host) -> None:
    _create(host, "epsilon", "before the standby stops")
    _replicated(standby, host, "epsilon")
    standby.stop()
    try:
        started = time.monotonic()
        for _ in range(5):  # the first may find its pooled standby connection dead: the primary answers
            assert "epsilon" in _names(host, READ_KEY)
        _create(host, "zeta", "while the standby is down")
        assert "zeta" in _names(host, READ_KEY)
        assert time.monotonic() - started < 60
    finally:
        standby.start()
    _replicated(standby, host, "zeta")


def test_on_another_host_a_read_misses_a_write_for_at_most_the_lag_bound(standby: Standby, host: Host) -> None:
    other = Host.start(_env(standby, 3))
    try:
        _create(host, "eta", "before the pause")
        _replicated(standby, host, "eta")
        eventually_sync(
            lambda: "eta" in _names(other, WRITE_KEY), timeout=60, interval=0.1, what="eta on the other host"
        )
        standby.pause_replay()
        try:
            _create(host, "theta", "written through the first host while replay is paused")
            written = time.monotonic()
            # the other host does not know the key wrote; once the standby lags beyond its bound (3 s) it
            # stops serving there, and the read goes to the primary, although replay is still paused
            eventually_sync(
                lambda: "theta" in _names(other, WRITE_KEY), timeout=60, interval=0.1, what="theta on the other host"
            )
            assert standby.sql("SELECT count(*) FROM graph_entities WHERE name = 'theta'") == "0"
            assert time.monotonic() - written < 3 + 20  # the bound, and room for a loaded machine
        finally:
            standby.resume_replay()
    finally:
        other.stop()
