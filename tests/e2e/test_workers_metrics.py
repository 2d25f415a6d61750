"""`cairn serve --workers 2`: /metrics, whichever worker answers it, counts the calls of both workers."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.hosts import Fleet
from tests.support.server import PgCluster

pytestmark = pytest.mark.slow  # a `cairn serve` host with two worker processes


def _calls_total(host_url: str) -> float:
    with httpx.Client(base_url=host_url, timeout=30) as fresh:  # a new connection: any worker may answer
        body = fresh.get("/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == "cairn_calls_total"
    )


def test_metrics_of_a_two_worker_host_count_the_calls_of_both_workers(pg: PgCluster) -> None:
    env = {"CAIRN_DATABASE_URL": pg.handle.url(pg.new_database()), "CAIRN_API_KEYS": ""}
    with Fleet() as fleet:
        host = fleet.start(env, args=["--workers", "2"])
        per_worker: dict[int, int] = {}
        made = 0
        for _ in range(400):  # each on a new connection, until both workers answered several
            with httpx.Client(base_url=host.url, timeout=30) as client:
                pid = client.get("/healthz").json()["pid"]  # the same connection, so the same worker
                assert client.get("/api/v1/projects").status_code == 200
            made += 1
            per_worker[pid] = per_worker.get(pid, 0) + 1
            if len(per_worker) == 2 and min(per_worker.values()) >= 3:
                break
        assert len(per_worker) == 2 and min(per_worker.values()) >= 3, per_worker
        for _ in range(4):
            assert _calls_total(host.url) == made
        metrics_dir = host.data_dir / "metrics" / str(host.port)
        assert any(metrics_dir.glob("counter_*.db"))
