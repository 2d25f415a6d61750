"""The `cairn` command: serve, stdio, migrate, keys, embed, backup, restore, version, and each enabled
feature's own sub-commands.

Every command receives `args.runtime` (`app.core.runtime.Runtime`: the settings and the enabled
features) and prints results on stdout, messages on stderr (`app.core.terminal`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich_argparse import RichHelpFormatter

from app import __version__
from app.core import terminal

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.core.db import Database
    from app.core.runtime import Runtime

# Commands that need neither the server nor a feature's code. For them `cairn` does not import the
# features (seconds of imports: DuckDB, ONNX, the MCP SDK…); the enabled features' names, all that
# migrating needs, come from the migration branches, whose labels are the feature names. This module
# imports at its top only what parsing needs: `cairn --help` and `cairn --version` stay fast.
LIGHT_COMMANDS = ("migrate", "keys", "embed", "backup", "restore", "version")

# The features' commands as `cairn --help` lists them without importing the features;
# tests/unit/test_cli.py checks this table against the commands the features register.
FEATURE_COMMANDS = {
    "backfill": "embed memories that lack a vector of the active model",
    "eval": "evaluate retrieval quality",
    "graph": "knowledge graph: import/export JSONL memory files",
    "analysis": "analysis sessions: demo upstream, expiry sweep",
}


def cmd_serve(args: argparse.Namespace) -> int:
    """Start the server: one process, or `--workers N` (`CAIRN_WORKERS`) processes on one port."""
    import uvicorn  # late: see LIGHT_COMMANDS

    from app.main import create_app

    rt: Runtime = args.runtime
    settings = rt.settings
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("workers", args.workers)) if v}
    if overrides:
        settings = settings.model_copy(update=overrides)
    options = serve_options(settings, os.environ)
    _check_port(settings.host, settings.port)  # before the database starts and migrates
    if settings.workers > 1:
        return _serve_workers(settings, rt.features, options)
    uvicorn.run(create_app(settings), **options)
    return 0


def serve_options(settings: Settings, environ: Mapping[str, str]) -> dict[str, Any]:
    """uvicorn's options for `cairn serve`: the address, the idle keep-alive of client connections
    (`CAIRN_HTTP_KEEP_ALIVE_SECONDS`), a 20 s grace for calls in flight at shutdown, and the proxy
    options."""
    return {
        "host": settings.host,
        "port": settings.port,
        "log_config": None,
        "timeout_graceful_shutdown": 20,
        "timeout_keep_alive": settings.http_keep_alive_seconds,
        **proxy_options(environ),
    }


def proxy_options(environ: Mapping[str, str]) -> dict[str, Any]:
    """uvicorn's proxy options: the client address (the failed-authentication limit's key) and scheme
    are taken from `X-Forwarded-For` / `X-Forwarded-Proto` only when `FORWARDED_ALLOW_IPS` names the
    peers trusted to set them (addresses, networks or `*`). Without it the headers are ignored, even
    from loopback (uvicorn's own default trusts them from 127.0.0.1, which would let any local process
    spread its failures over made-up addresses)."""
    trusted = environ.get("FORWARDED_ALLOW_IPS", "").strip()
    if not trusted:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": trusted}


def _check_port(host: str, port: int) -> None:
    """Fail at once, with a message, when the address is taken or cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as err:
            raise OSError(f"cannot listen on {host}:{port}: {err.strerror or err}") from None


def cmd_stdio(args: argparse.Namespace) -> int:
    """Serve MCP over stdin/stdout (for clients that start the server themselves)."""
    from app.main import run_stdio  # late: see LIGHT_COMMANDS

    return run_stdio(args.runtime.settings, args.toolsets)


def _serve_workers(settings: Settings, features: list[str], options: dict[str, Any]) -> int:
    """`settings.workers` uvicorn worker processes sharing one listening socket and one database.

    This process starts the embedded PostgreSQL (when no CAIRN_DATABASE_URL is set) and migrates, once;
    each worker builds the app (`create_worker_app`) from the environment, which names that database and
    turns start-up migrations off. On SIGTERM/SIGINT uvicorn stops the workers (each finishing its
    in-flight calls), then this process stops the embedded PostgreSQL. Exits 3 when a worker could not
    start (uvicorn then stops the others)."""
    import uvicorn  # late: see LIGHT_COMMANDS
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    from app.core.db import connection_budget
    from app.core.logs import configure_logging
    from app.core.metrics import prepare_multiprocess
    from app.main import bootstrap

    configure_logging(settings.log_level, settings.log_format)
    prepare_multiprocess(settings.data_dir / "metrics" / str(settings.port))  # one /metrics for every worker
    boot = bootstrap(settings, features)
    budget = connection_budget(settings, settings.workers)
    logging.getLogger("cairn").info(
        f"{settings.workers} workers: at most {budget} database connections from this host "
        f"({settings.workers} x (pool {settings.db_pool_size} + overflow {settings.db_max_overflow}))",
        extra={"db_connections_max": budget},
    )
    os.environ.update(
        {
            "CAIRN_DATABASE_URL": boot.url,
            "CAIRN_MIGRATE_ON_START": "false",
            "CAIRN_HOST": settings.host,
            "CAIRN_PORT": str(settings.port),
            "CAIRN_WORKERS": "1",
        }
    )
    # What uvicorn.run does with workers, keeping the supervisor to read the workers' exit codes.
    config = uvicorn.Config("app.main:create_worker_app", factory=True, workers=settings.workers, **options)
    try:
        sock = config.bind_socket()
        # The shared socket is made without IPPROTO_TCP, so asyncio does not set TCP_NODELAY on the
        # connections it accepts: Nagle's algorithm then held every second write of a response for a
        # delayed ACK (~40 ms per sequential call). Accepted connections inherit it from here.
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        supervisor = Multiprocess(config, sockets=[sock])
        supervisor.run()
    finally:
        if boot.pg is not None:
            boot.pg.stop()
    return STARTUP_FAILURE if any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes) else 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Upgrade the enabled features' migration branches."""
    rt: Runtime = args.runtime
    with rt.database_url(migrate=True):
        print(f"migrated: core + {', '.join(rt.features) or 'no features'}")
    return 0


def _key_row(r: Any) -> dict[str, Any]:
    return {
        "id": str(r.id),
        "prefix": r.prefix,
        "name": r.name,
        "scopes": r.scopes,
        "project": r.project,
        "toolsets": r.toolsets,
        "created_at": r.created_at.isoformat(),
        "last_used_at": r.last_used_at.isoformat() if r.last_used_at else None,
        "revoked": r.revoked_at is not None,
    }


def cmd_keys(args: argparse.Namespace) -> int:
    """Create, list or revoke API keys."""
    from app.core.auth import create_key, parse_scopes  # late: see LIGHT_COMMANDS
    from app.core.repository import ApiKeyRepository
    from app.core.toolsets import key_toolsets

    rt: Runtime = args.runtime
    if args.keys_cmd == "create":
        scopes = parse_scopes(args.scopes)
        toolsets = key_toolsets(args.toolsets)
        key_id, token = rt.run(
            lambda db: create_key(db, scopes=scopes, project=args.project, name=args.name or "", toolsets=toolsets)
        )
        terminal.info(f"id: {key_id}")
        terminal.info(f"scopes: {','.join(scopes)}  project: {args.project or '(any)'}")
        terminal.info(f"plain /mcp lists: {','.join(toolsets) if toolsets else '(the server default)'}")
        terminal.info("Store this key now; it is not shown again.")
        print(token)
        return 0
    if args.keys_cmd == "list":

        async def listing(db: Database) -> list[dict[str, Any]]:
            async with db.transaction() as session:
                return [_key_row(r) for r in await ApiKeyRepository(session).list(include_revoked=args.all)]

        columns = ["prefix", "name", "scopes", "project", "toolsets", "created_at", "last_used_at", "revoked"]
        terminal.table(rt.run(listing), columns, as_json=True if args.json else None)
        return 0

    async def revoke(db: Database) -> int:
        async with db.transaction() as session:
            return await ApiKeyRepository(session).revoke(args.key)

    count = rt.run(revoke)
    print(f"revoked {count} key(s)")
    return 0 if count else 1


def cmd_embed(args: argparse.Namespace) -> int:
    """Embed texts from arguments or stdin and print compact summaries (JSON lines)."""
    rt: Runtime = args.runtime
    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]

    async def run() -> None:
        async with rt.embedder() as embedder:
            with terminal.progress(len(texts), "embedding") as bar:
                for i in range(0, len(texts), 32):
                    batch = texts[i : i + 32]
                    vectors = await embedder.embed(batch)
                    for text, vec in zip(batch, vectors, strict=True):
                        terminal.emit(
                            {
                                "text": text[:60],
                                "model": embedder.model,
                                "dimension": len(vec),
                                "head": [round(v, 5) for v in vec[:6]],
                            }
                        )
                    bar.advance(len(batch))

    asyncio.run(run())
    return 0


def _pg_tool(name: str) -> str:
    from app.core.pgembedded import bin_path  # late: see LIGHT_COMMANDS

    return str(bin_path(name))


def _libpq(url: str) -> str:
    """A libpq URI from a SQLAlchemy URL (drops the driver suffix)."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def cmd_backup(args: argparse.Namespace) -> int:
    """Dump the database (custom format) with the bundled pg_dump."""
    rt: Runtime = args.runtime
    with rt.database_url(migrate=False) as url:
        subprocess.run(
            [
                _pg_tool("pg_dump"),
                "--format=custom",
                "--no-owner",
                "--file",
                args.file,
                _libpq(rt.settings.direct_url(url)),
            ],
            check=True,
        )
    terminal.info(f"backup written to {args.file}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    """Restore a dump made by `cairn backup`, replacing what the database holds."""
    rt: Runtime = args.runtime
    with rt.database_url(migrate=False) as url:
        subprocess.run(
            [
                _pg_tool("pg_restore"),
                "--clean",
                "--if-exists",
                "--no-owner",
                "--single-transaction",
                "--exit-on-error",
                "--dbname",
                _libpq(rt.settings.direct_url(url)),
                args.file,
            ],
            check=True,
        )
    terminal.info(f"restored from {args.file}")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    """Print the version."""
    print(__version__)
    return 0


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


class CairnParser(argparse.ArgumentParser):
    """argparse with Rich's help formatter (colour on a terminal); sub-command parsers inherit it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", RichHelpFormatter)
        super().__init__(*args, **kwargs)


def build_parser(with_features: bool = True) -> argparse.ArgumentParser:
    """The argument parser of `cairn`, with every feature's sub-commands unless `with_features` is
    false (then `FEATURE_COMMANDS` only names them, for the help)."""
    parser = CairnParser(prog="cairn", description="Cairn memory and analysis server")
    parser.add_argument("--version", action="version", version=f"cairn {__version__}", help="print the version")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="start the server")
    serve.add_argument("--host", help="address to bind (default: CAIRN_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: CAIRN_PORT, 8000)")
    serve.add_argument(
        "--workers",
        type=_positive,
        help="server processes on this host, sharing one database (default: CAIRN_WORKERS, 1)",
    )
    serve.set_defaults(fn=cmd_serve)
    stdio = sub.add_parser(
        "stdio",
        help="serve MCP over stdin/stdout, for desktop clients that start the server (no key needed)",
    )
    stdio.add_argument(
        "--toolsets",
        help="toolsets to list, as after /mcp/ (e.g. graph or memory,datasets+readonly; "
        "default: CAIRN_MCP_TOOLSETS, else the default toolsets)",
    )
    stdio.set_defaults(fn=cmd_stdio)
    sub.add_parser("migrate", help="upgrade the database schema").set_defaults(fn=cmd_migrate)
    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_cmd", required=True)
    create = keys_sub.add_parser("create", help="create a key (printed once, alone on the last line)")
    create.add_argument(
        "--scopes", default="read,write", help="read, write, admin, comma-separated (default read,write)"
    )
    create.add_argument("--project", help="bind the key to this one project")
    create.add_argument("--name", help="a label shown by `keys list`")
    create.add_argument(
        "--toolsets", help="what plain /mcp lists for this key, e.g. graph,memory (default: the server's)"
    )
    listing = keys_sub.add_parser("list", help="list keys")
    listing.add_argument("--all", action="store_true", help="include revoked keys")
    listing.add_argument("--json", action="store_true", help="JSON lines even on a terminal (the default elsewhere)")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id or prefix")
    revoke.add_argument("key", help="the key's id or its prefix (as `keys list` shows)")
    keys.set_defaults(fn=cmd_keys)
    embed = sub.add_parser("embed", help="embed texts (arguments or stdin lines)")
    embed.add_argument("text", nargs="*", help="texts to embed (default: one per line of stdin)")
    embed.set_defaults(fn=cmd_embed)
    backup = sub.add_parser("backup", help="dump the database to FILE (pg_dump custom format)")
    backup.add_argument("file", help="where to write the dump")
    backup.set_defaults(fn=cmd_backup)
    restore = sub.add_parser("restore", help="restore the database from FILE made by `cairn backup`")
    restore.add_argument("file", type=terminal.readable_file, help="a dump made by `cairn backup`")
    restore.set_defaults(fn=cmd_restore)
    sub.add_parser("version", help="print the version").set_defaults(fn=cmd_version)
    if with_features:
        from app.features import FEATURES  # late: see LIGHT_COMMANDS

        for feature in FEATURES:
            if feature.cli is not None:
                feature.cli(sub)
    else:
        for name, text in FEATURE_COMMANDS.items():
            sub.add_parser(name, help=text, add_help=False)
    return parser


def runtime(settings: Settings, light: bool) -> Runtime:
    """The enabled features for a command (checked against the features that exist)."""
    from app.core import migrations
    from app.core.feature import resolve
    from app.core.runtime import Runtime

    if light:
        return Runtime(settings, resolve(migrations.feature_branches(), settings.features))
    from app.core.feature import build_settings
    from app.features import enabled

    features = enabled(settings.features)
    return Runtime(
        settings,
        [f.name for f in features],
        build_settings(features),
        [t for f in features for t in f.embedding_targets],
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    words = sys.argv[1:] if argv is None else argv
    command = next((w for w in words if not w.startswith("-")), None)
    light = command is None or command in LIGHT_COMMANDS  # None: `cairn --help`, `cairn --version`
    args = build_parser(with_features=not light).parse_args(words)
    if args.cmd == "version":  # needs no settings
        return cmd_version(args)
    from app.core.config import Settings
    from app.core.errors import CairnError

    try:
        args.runtime = runtime(Settings(), light)
    except ValueError as err:  # pydantic's ValidationError included
        print(f"error: invalid configuration: {err}", file=sys.stderr)
        return 2
    try:
        return int(args.fn(args) or 0)
    except CairnError as err:
        print(f"error: {err.message}", file=sys.stderr)
        for hint in err.suggestions:
            print(f"hint: {hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as err:  # the tool printed its own message above
        tool = os.path.basename(str(err.cmd[0])) if isinstance(err.cmd, list | tuple) else str(err.cmd)
        print(f"error: {tool} failed (exit status {err.returncode})", file=sys.stderr)
        return 1
    except (OSError, RuntimeError, ValueError) as err:  # missing files, busy ports, refused settings
        print(f"error: {err}", file=sys.stderr)
        if args.runtime.settings.log_level.upper() == "DEBUG":
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())
