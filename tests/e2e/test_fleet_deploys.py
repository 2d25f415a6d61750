"""A rolling deploy with two builds on one database (expand/contract, docs/reliability.md).

The current tree is the older build. The newer build is a copy of the `app` package with one more
memory revision (a nullable column, `older_code_may_run = True`) and a version of its own, started
from the copy's folder. While the newer host migrates, the older host stays ready; the older host
restarts fine on the newer schema. Once the newer build adds a revision older code may not run on
(`older_code_may_run = False`), the older build refuses to start and says which build is needed."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app import __version__
from app.core import migrations
from tests.support.hosts import ROOT, Fleet, Host
from tests.support.server import ADMIN_KEY, STATIC_KEYS, PgCluster

pytestmark = pytest.mark.slow

NEWER = "9.0.0"
NEWEST = "9.1.0"
REVISION = '''"""memory: a note on each memory (a test's newer build)"""

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
older_code_may_run: bool = {safe}


def upgrade() -> None:
    from alembic import op

    op.execute("{sql}")


def downgrade() -> None:
    pass
'''


def _memory_head() -> str:
    (head,) = migrations.script_directory().get_revisions("memory@head")
    assert head is not None
    return head.revision


def _build(root: Path, version: str) -> None:
    """Give the build copied under `root` its own version."""
    init = root / "app" / "__init__.py"
    init.write_text(re.sub(r'__version__ = "[^"]*"', f'__version__ = "{version}"', init.read_text()))


def _add_revision(root: Path, revision: str, down: str, *, safe: bool, sql: str) -> None:
    path = root / "app" / "memory" / "migrations" / f"{revision}.py"
    path.write_text(REVISION.format(revision=revision, down=down, safe=safe, sql=sql))


@pytest.fixture
def newer_build(tmp_path: Path) -> Path:
    """A copy of the `app` package with one more, expand-only, revision (version NEWER)."""
    shutil.copytree(ROOT / "app", tmp_path / "app", ignore=shutil.ignore_patterns("__pycache__"))
    _build(tmp_path, NEWER)
    _add_revision(
        tmp_path, "memory_9001_note", _memory_head(), safe=True, sql="ALTER TABLE memories ADD COLUMN note text"
    )
    return tmp_path


class ReadyWatch:
    """Polls a host's `/readyz` in a thread and keeps every answer that was not 200."""

    def __init__(self, host: Host) -> None:
        self.host, self.failures, self.polls = host, list[str](), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                reply = httpx.get(f"{self.host.url}/readyz", timeout=10)
                if reply.status_code != 200:
                    self.failures.append(reply.text[:300])
            except httpx.HTTPError as exc:
                self.failures.append(repr(exc))
            self.polls += 1
            self._stop.wait(0.1)

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    with Fleet() as hosts:
        yield hosts


def _serves(host: Host, name: str) -> None:
    auth = {"Authorization": f"Bearer {ADMIN_KEY}"}
    created = httpx.post(f"{host.api}/projects", json={"name": name}, headers=auth, timeout=30)
    assert created.status_code == 200, created.text
    listed = httpx.get(f"{host.api}/projects", headers=auth, timeout=30).json()["projects"]
    assert name in {p["name"] for p in listed}


def test_an_older_build_runs_on_an_expanded_schema_and_refuses_a_contracted_one(
    pg: PgCluster, newer_build: Path, fleet: Fleet
) -> None:
    db = pg.new_database()
    env = {"CAIRN_DATABASE_URL": pg.handle.url(db), "CAIRN_API_KEYS": ",".join(STATIC_KEYS)}
    older = fleet.start(env)
    older.wait_ready(path="/readyz")

    with ReadyWatch(older) as watch:  # the newer build migrates while the older host serves
        newer = fleet.start({**env, "PYTHONPATH": str(newer_build)}, cwd=newer_build)
        newer.wait_ready(path="/readyz")
    assert watch.polls > 0 and watch.failures == []
    heads = {r["version_num"] for r in _rows(pg, db, "SELECT version_num FROM alembic_version")}
    assert "memory_9001_note" in heads  # the newer build did migrate
    builds = {r["revision"]: r["build"] for r in _rows(pg, db, "SELECT revision, build FROM schema_revisions")}
    assert builds["memory_9001_note"] == NEWER
    assert httpx.get(f"{older.url}/readyz", timeout=30).status_code == 200
    _serves(older, "from-the-older-build")
    _serves(newer, "from-the-newer-build")

    older.stop()  # an older host restarts on the newer schema: no migration, ready
    older.launch()
    older.wait_ready(path="/readyz")
    assert "not migrating" in older.log()
    _serves(older, "after-the-restart")

    # The newest build contracts: older code may not run on its revision.
    _build(newer_build, NEWEST)
    _add_revision(
        newer_build, "memory_9002_drop", "memory_9001_note", safe=False, sql="ALTER TABLE memories DROP COLUMN note"
    )
    newer.stop()
    newer.launch()
    newer.wait_ready(path="/readyz")
    older.stop()
    older.launch()
    assert older.exited() != 0
    assert (
        f"the database schema is at memory_9002_drop (written by build {NEWEST}); this build ({__version__}) "
        f"cannot run on it: deploy build {NEWEST} or newer"
    ) in older.log()


def _rows(pg: PgCluster, database: str, sql: str) -> list[dict[str, str]]:
    """Rows of `sql` on `database` (through psql)."""
    out = pg.handle.psql(database, f"SELECT row_to_json(t) FROM ({sql}) t")
    return [json.loads(line) for line in out.splitlines() if line.strip()]
