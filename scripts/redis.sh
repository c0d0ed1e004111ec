#!/usr/bin/env bash
# A throw-away redis-server for the Redis tests (feature `redis`).
#
# Sourced (scripts/test.sh does this): makes sure `redis-server` is installed
# (apt-get on Debian, as root), starts one on 127.0.0.1:${RESILIENCE_REDIS_PORT:-6391}
# without persistence, waits until it answers PING, exports
# RESILIENCE_REDIS_URL=redis://127.0.0.1:PORT/ and stops the server when the sourcing
# shell exits, whether the tests passed or not.
#
# Run directly, it does the same around one command:
#   scripts/redis.sh cargo test -p resilience-runtime --features redis --test redis_bloom
#
# If RESILIENCE_REDIS_URL is already set, that server is used and nothing is started.

RESILIENCE_REDIS_PORT="${RESILIENCE_REDIS_PORT:-6391}"
RESILIENCE_REDIS_PID=""
RESILIENCE_REDIS_LOG="${TMPDIR:-/tmp}/resilience-redis-${RESILIENCE_REDIS_PORT}.log"

redis_install() {
    command -v redis-server >/dev/null 2>&1 && return 0
    if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
        echo "redis.sh: redis-server is not installed; install it (Debian: apt-get install redis-server)" >&2
        return 1
    fi
    echo "== installing redis-server (apt-get)"
    local log="${TMPDIR:-/tmp}/resilience-redis-apt.log"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            redis-server; } >"$log" 2>&1; then
        echo "redis.sh: installing redis-server failed:" >&2
        cat "$log" >&2
        return 1
    fi
}

# PING over bash's /dev/tcp, so redis-cli is not needed; at most ~1 s.
redis_ping() {
    timeout 1 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "PING\r\n" >&3
        IFS= read -r -t 1 reply <&3 || exit 1
        case "$reply" in "+PONG"*) exit 0 ;; *) exit 1 ;; esac
    ' _ "$1" 2>/dev/null
}

redis_stop() {
    if [ -n "$RESILIENCE_REDIS_PID" ]; then
        kill "$RESILIENCE_REDIS_PID" 2>/dev/null || true
        wait "$RESILIENCE_REDIS_PID" 2>/dev/null || true
        RESILIENCE_REDIS_PID=""
    fi
}

redis_start() {
    if [ -n "${RESILIENCE_REDIS_URL:-}" ]; then
        echo "== using the Redis at RESILIENCE_REDIS_URL=$RESILIENCE_REDIS_URL"
        return 0
    fi
    redis_install || return 1
    local port="$RESILIENCE_REDIS_PORT"
    if redis_ping "$port"; then
        echo "redis.sh: something already answers on 127.0.0.1:$port; stop it, or set RESILIENCE_REDIS_PORT or RESILIENCE_REDIS_URL" >&2
        return 1
    fi
    echo "== starting redis-server on 127.0.0.1:$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --loglevel warning --logfile "$RESILIENCE_REDIS_LOG" \
        --dir "${TMPDIR:-/tmp}" </dev/null >/dev/null 2>&1 &
    RESILIENCE_REDIS_PID=$!
    trap redis_stop EXIT
    local i
    for i in $(seq 1 100); do # up to ~10 s
        if redis_ping "$port"; then
            export RESILIENCE_REDIS_URL="redis://127.0.0.1:$port/"
            return 0
        fi
        if ! kill -0 "$RESILIENCE_REDIS_PID" 2>/dev/null; then
            echo "redis.sh: redis-server exited at start; its log:" >&2
            cat "$RESILIENCE_REDIS_LOG" >&2 2>/dev/null || true
            RESILIENCE_REDIS_PID=""
            return 1
        fi
        sleep 0.1
    done
    echo "redis.sh: redis-server did not answer PING on 127.0.0.1:$port within 10 s" >&2
    redis_stop
    return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # Run as a command: start Redis, run the arguments, stop Redis.
    set -euo pipefail
    redis_start
    "$@"
else
    redis_start
fi
