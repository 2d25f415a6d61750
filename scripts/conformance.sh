#!/usr/bin/env bash
# Run the generic server scenarios of @modelcontextprotocol/conformance against a local Cairn server.
#
#   scripts/conformance.sh                   # start a throwaway server, run the scenarios, stop it
#   scripts/conformance.sh ping tools-list   # only these scenarios
#   CONFORMANCE_URL=http://127.0.0.1:8000/mcp scripts/conformance.sh   # test a server already running
#                                                                      # (it must run without API keys)
#   CONFORMANCE_PATHS="/mcp /mcp/graph" scripts/conformance.sh          # only these endpoints
#
# Every scenario runs against plain /mcp, /mcp/all and each toolset endpoint the server lists.
#
# The started server binds 127.0.0.1 on a free port without API keys (open mode, loopback only: the
# suite sends no Authorization header), with its data (embedded PostgreSQL) in a temporary directory.
# The suite needs Node >= 22: the node on PATH is used when it is recent enough, otherwise Node 22 is
# installed from npm into .cache/node22 (git-ignored), next to the pinned conformance package.
# Exit status: 0 when every scenario passed, 1 otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
NODE_DIR="$CACHE/node22"
CONFORMANCE_VERSION="${CONFORMANCE_VERSION:-0.1.16}"
DEFAULT_SCENARIOS=(server-initialize ping tools-list tools-call-error resources-list dns-rebinding-protection)
if [ "$#" -gt 0 ]; then SCENARIOS=("$@"); else SCENARIOS=("${DEFAULT_SCENARIOS[@]}"); fi

say() { printf 'conformance: %s\n' "$*" >&2; }

mkdir -p "$CACHE"
[ -f "$CACHE/.gitignore" ] || printf '*\n' > "$CACHE/.gitignore"
export npm_config_cache="$CACHE/npm"

# --- Node 22 and the conformance package ------------------------------------------------------------
node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
NODE=""
if command -v node >/dev/null 2>&1 && [ "$(node_major node)" -ge 22 ]; then
    NODE="$(command -v node)"
fi
PKG="$NODE_DIR/node_modules/@modelcontextprotocol/conformance"
installed_version() { sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$PKG/package.json" 2>/dev/null | head -1; }
if [ "$(installed_version)" != "$CONFORMANCE_VERSION" ] || { [ -z "$NODE" ] && [ ! -x "$NODE_DIR/node_modules/node/bin/node" ]; }; then
    command -v npm >/dev/null 2>&1 || { say "npm is required to fetch the conformance suite"; exit 1; }
    say "installing @modelcontextprotocol/conformance@$CONFORMANCE_VERSION (and Node 22) into $NODE_DIR"
    mkdir -p "$NODE_DIR"
    packages=("@modelcontextprotocol/conformance@$CONFORMANCE_VERSION")
    [ -n "$NODE" ] || packages+=("node@22")
    npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "${packages[@]}" >&2
fi
if [ -z "$NODE" ]; then
    NODE="$NODE_DIR/node_modules/node/bin/node"
    [ -x "$NODE" ] || { say "Node 22 was not installed ($NODE missing)"; exit 1; }
fi
say "node $("$NODE" --version), conformance $(installed_version)"

# --- the server -------------------------------------------------------------------------------------
if [ -x "$ROOT/.venv/bin/cairn" ]; then
    BIN="$ROOT/.venv/bin"
else
    BIN="$(dirname "$(command -v cairn || echo /nonexistent/cairn)")"
fi
PYTHON="$BIN/python"
[ -x "$PYTHON" ] || PYTHON="$(command -v python3)"

SERVER_PID=""
DATA_DIR=""
cleanup() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    [ -z "$DATA_DIR" ] || rm -rf "$DATA_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${CONFORMANCE_URL:-}" ]; then
    URL="$CONFORMANCE_URL"
else
    [ -x "$BIN/cairn" ] || { say "cairn is not installed: run 'python3 dev.py install' first"; exit 1; }
    PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    DATA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/cairn-conformance.XXXXXX")"
    URL="http://127.0.0.1:$PORT/mcp"
    say "starting cairn on 127.0.0.1:$PORT (data in $DATA_DIR)"
    # A clean environment for the server: no inherited CAIRN_* settings (keys, database, host ...).
    env_args=()
    while IFS='=' read -r name _; do
        case "$name" in CAIRN_*) env_args+=("-u" "$name") ;; esac
    done < <(env)
    env "${env_args[@]}" CAIRN_DATA_DIR="$DATA_DIR" CAIRN_LOG_LEVEL="${CAIRN_LOG_LEVEL:-WARNING}" \
        "$BIN/cairn" serve --host 127.0.0.1 --port "$PORT" >"$DATA_DIR/server.log" 2>&1 &
    SERVER_PID=$!
    if ! "$PYTHON" - "$PORT" "$SERVER_PID" <<'PY'
import os
import sys
import time
import urllib.request

port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit("the server exited during start-up")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            if answer.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit("the server did not become ready in 180 s")
PY
    then
        say "server log:"; tail -n 40 "$DATA_DIR/server.log" >&2 || true
        exit 1
    fi
    say "server ready"
fi

# --- the endpoints: plain /mcp, /mcp/all and every toolset the server lists ------------------------
BASE="${URL%/mcp}"
if [ -n "${CONFORMANCE_PATHS:-}" ]; then
    read -r -a ENDPOINTS <<< "$CONFORMANCE_PATHS"
else
    mapfile -t ENDPOINTS < <("$PYTHON" - "$BASE" <<'PY'
import json
import sys
import urllib.request

with urllib.request.urlopen(f"{sys.argv[1]}/api/v1/resources/toolsets", timeout=30) as answer:
    listed = json.load(answer)["toolsets"]
print("/mcp")
print("/mcp/all")
for toolset in listed:
    print(toolset["endpoint"])
PY
    )
fi
[ "${#ENDPOINTS[@]}" -gt 0 ] || { say "no endpoints to test"; exit 1; }

# --- the scenarios ----------------------------------------------------------------------------------
RESULTS="$CACHE/conformance-results"
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
passed=()
failed=()
for endpoint in "${ENDPOINTS[@]}"; do
    for scenario in "${SCENARIOS[@]}"; do
        say "$endpoint: scenario $scenario"
        out="$RESULTS/${endpoint//\//_}"
        mkdir -p "$out"
        if "$NODE" "$PKG/dist/index.js" server --url "$BASE$endpoint" --scenario "$scenario" -o "$out" >"$out/$scenario.log" 2>&1; then
            passed+=("$endpoint $scenario")
        else
            failed+=("$endpoint $scenario")
            tail -n 20 "$out/$scenario.log" >&2 || true
        fi
    done
done

echo
echo "MCP conformance ($(installed_version)) against $BASE, ${#ENDPOINTS[@]} endpoints"
for s in "${passed[@]+"${passed[@]}"}"; do echo "  PASS  $s"; done
for s in "${failed[@]+"${failed[@]}"}"; do echo "  FAIL  $s"; done
echo "${#passed[@]} passed, ${#failed[@]} failed (details in ${RESULTS#"$ROOT"/})"
[ "${#failed[@]}" -eq 0 ]
