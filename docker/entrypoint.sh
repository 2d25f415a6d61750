#!/bin/sh
# Container entrypoint: wait for PostgreSQL, upgrade the schema, then serve.
#
#   CAIRN_DATABASE_URL       database to wait for (unset: the embedded PostgreSQL is used, no wait)
#   CAIRN_DB_WAIT_TIMEOUT    seconds to wait for the database before giving up (default 60)
#   CAIRN_HOST               address to bind (default 0.0.0.0; API keys are then required)
#
# With arguments that do not start with "-", they are run instead of the server once the database
# is ready and migrated (e.g. `docker compose run --rm app cairn keys create --scopes read,write`).
# Arguments starting with "-" are passed on to `cairn serve`.
set -eu

log() {
    printf '%s entrypoint: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >&2
}

wait_for_database() {
    timeout="${CAIRN_DB_WAIT_TIMEOUT:-60}"
    log "waiting up to ${timeout}s for the database"
    python - "$timeout" <<'PY'
import asyncio
import os
import sys
import time

import asyncpg

timeout = float(sys.argv[1])
url = os.environ["CAIRN_DATABASE_URL"]
# SQLAlchemy URL (postgresql+asyncpg://...) -> libpq-style DSN that asyncpg understands.
dsn = "postgresql://" + url.split("://", 1)[1]
deadline = time.monotonic() + timeout
last = "no attempt made"
while True:
    try:
        async def probe() -> None:
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                await conn.fetchval("SELECT 1")
            finally:
                await conn.close()

        asyncio.run(probe())
        break
    except Exception as exc:  # any failure means "not yet"
        last = f"{type(exc).__name__}: {exc}"
    if time.monotonic() >= deadline:
        sys.stderr.write(f"database not reachable after {timeout:g}s (last error: {last})\n")
        sys.exit(1)
    time.sleep(1)
PY
}

if [ -n "${CAIRN_DATABASE_URL:-}" ]; then
    if ! wait_for_database; then
        log "giving up: the database at CAIRN_DATABASE_URL did not answer in time"
        exit 1
    fi
    log "database is up"
else
    log "CAIRN_DATABASE_URL is unset: using the embedded PostgreSQL under ${CAIRN_DATA_DIR:-the user data dir}"
fi

log "migrating"
cairn migrate

case "${1:-}" in
    "" | -*)
        log "starting the server"
        # Migrated above: the server need not check again.
        CAIRN_MIGRATE_ON_START=false exec cairn serve --host "${CAIRN_HOST:-0.0.0.0}" "$@"
        ;;
    *)
        exec "$@"
        ;;
esac
