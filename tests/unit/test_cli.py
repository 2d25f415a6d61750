"""The `cairn` command's parser: every option and argument says what it is for."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from app import __version__
from app.cli import FEATURE_COMMANDS, build_parser, main
from app.features import FEATURES


def _undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield f"{path}: {action.option_strings[0] if action.option_strings else action.dest}"


def test_every_option_has_help() -> None:
    assert list(_undocumented(build_parser(), "cairn")) == []


def test_sub_commands_use_the_same_help_formatter() -> None:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {type(p).__name__ for p in subs.choices.values()} == {type(parser).__name__}
    assert "serve" in parser.format_help() and "stdio" in parser.format_help()


def test_the_readme_lists_every_command() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    listed = readme.split("## Commands", 1)[1].split("```")[1]
    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert [name for name in subs.choices if f"cairn {name}" not in listed] == []


def _commands(parser: argparse.ArgumentParser) -> dict[str, str]:
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {action.dest: str(action.help) for action in subs._choices_actions}


def test_the_light_parser_names_the_features_commands_as_they_do() -> None:
    assert _commands(build_parser(with_features=False)) == _commands(build_parser())
    registered = argparse.ArgumentParser()
    sub = registered.add_subparsers()
    for feature in FEATURES:
        if feature.cli is not None:
            feature.cli(sub)
    assert _commands(registered) == FEATURE_COMMANDS


@pytest.mark.parametrize("flag", ["--help", "--version", "version"])
def test_help_and_version_import_no_feature_and_no_server_part(flag: str) -> None:
    """What keeps `cairn --help` / `--version` fast (docs/benchmarks.md, "Command start")."""
    probe = (
        "import sys\n"
        "from app.cli import main\n"
        "try:\n"
        f"    main([{flag!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    loaded = set(done.stderr.split())
    heavy = {"app.features", "app.core.config", "app.core.db", "sqlalchemy", "fastapi", "pydantic", "numpy"}
    assert "app.cli" in loaded
    assert sorted(heavy & loaded) == []
    assert not [m for m in loaded if m.startswith(("app.memory", "app.graph", "app.analysis", "app.datasets"))]
    assert done.stdout.strip() != ""


def test_version_is_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"cairn {metadata.version('cairn-server')}" == f"cairn {__version__}"


def test_proxy_headers_are_read_only_from_the_peers_forwarded_allow_ips_names() -> None:
    from app.cli import proxy_options

    assert proxy_options({}) == {"proxy_headers": False}  # not even from loopback (uvicorn's default)
    assert proxy_options({"FORWARDED_ALLOW_IPS": " "}) == {"proxy_headers": False}
    assert proxy_options({"FORWARDED_ALLOW_IPS": "10.0.0.0/8,192.0.2.1"}) == {
        "proxy_headers": True,
        "forwarded_allow_ips": "10.0.0.0/8,192.0.2.1",
    }


def test_serve_keeps_idle_connections_longer_than_clients_and_proxies_do() -> None:
    from app.cli import serve_options
    from app.core.config import Settings

    options = serve_options(Settings(host="127.0.0.1", port=8123), {})
    assert options["timeout_keep_alive"] == 75  # above httpx's 5 s and the usual proxies' 60 s
    assert (options["host"], options["port"], options["proxy_headers"]) == ("127.0.0.1", 8123, False)
    assert serve_options(Settings(http_keep_alive_seconds=3), {})["timeout_keep_alive"] == 3
