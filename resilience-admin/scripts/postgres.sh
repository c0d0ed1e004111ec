#!/usr/bin/env bash
# A throw-away PostgreSQL server for resilience-admin's `postgres` feature tests.
#
# Sourced (scripts/test.sh does this): makes sure PostgreSQL is installed (apt-get on
# Debian, as root), creates a cluster in a temporary directory, starts it on
# 127.0.0.1:${RESILIENCE_ADMIN_PG_PORT:-5491} with trust authentication and no fsync,
# exports RESILIENCE_ADMIN_PG_URL, and stops and deletes it when the sourcing shell
# exits, pass or fail. An EXIT trap set before (scripts/redis.sh's) is kept: ours
# runs first, then it.
#
# Run directly, it does the same around one command:
#   resilience-admin/scripts/postgres.sh cargo test -p resilience-admin --features postgres --test postgres
#
# If RESILIENCE_ADMIN_PG_URL is already set, that server is used and nothing is started.

RESILIENCE_ADMIN_PG_PORT="${RESILIENCE_ADMIN_PG_PORT:-5491}"
RESILIENCE_ADMIN_PG_DIR=""

pg_bin_dir() {
    local initdb
    initdb=$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$initdb" ]; then
        initdb=$(command -v initdb 2>/dev/null || true)
    fi
    [ -n "$initdb" ] && dirname "$initdb"
}

pg_install() {
    [ -n "$(pg_bin_dir)" ] && return 0
    if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
        echo "postgres.sh: PostgreSQL is not installed; install it (Debian: apt-get install postgresql)" >&2
        return 1
    fi
    echo "== installing postgresql (apt-get)"
    local log="${TMPDIR:-/tmp}/resilience-postgres-apt.log"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            postgresql; } >"$log" 2>&1; then
        echo "postgres.sh: installing postgresql failed:" >&2
        cat "$log" >&2
        return 1
    fi
}

# Runs a command as the cluster's owner: `postgres` when we are root (the server
# refuses to run as root), ourselves otherwise.
pg_as_owner() {
    if [ "$(id -u)" -eq 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

pg_stop() {
    if [ -n "$RESILIENCE_ADMIN_PG_DIR" ]; then
        pg_as_owner "$(pg_bin_dir)/pg_ctl" -D "$RESILIENCE_ADMIN_PG_DIR/data" -m immediate stop \
            >/dev/null 2>&1 || true
        rm -rf "$RESILIENCE_ADMIN_PG_DIR"
        RESILIENCE_ADMIN_PG_DIR=""
    fi
}

# Adds pg_stop in front of whatever EXIT trap is already set.
pg_chain_exit_trap() {
    local current
    current=$(trap -p EXIT)
    if [ -n "$current" ]; then
        # `trap -p` prints `trap -- 'COMMAND' EXIT`; eval splits it back into words.
        eval "set -- $current"
        trap "pg_stop; $3" EXIT
    else
        trap pg_stop EXIT
    fi
}

pg_port_in_use() {
    timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

pg_start() {
    if [ -n "${RESILIENCE_ADMIN_PG_URL:-}" ]; then
        echo "== using the PostgreSQL at RESILIENCE_ADMIN_PG_URL"
        return 0
    fi
    pg_install || return 1
    local bin port="$RESILIENCE_ADMIN_PG_PORT"
    bin=$(pg_bin_dir)
    if pg_port_in_use "$port"; then
        echo "postgres.sh: something already listens on 127.0.0.1:$port; stop it, or set" \
            "RESILIENCE_ADMIN_PG_PORT or RESILIENCE_ADMIN_PG_URL" >&2
        return 1
    fi
    RESILIENCE_ADMIN_PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/resilience-pg.XXXXXX")
    pg_chain_exit_trap
    if [ "$(id -u)" -eq 0 ]; then
        chown postgres "$RESILIENCE_ADMIN_PG_DIR"
    fi
    echo "== starting PostgreSQL on 127.0.0.1:$port"
    local user
    user=$([ "$(id -u)" -eq 0 ] && echo postgres || id -un)
    if ! pg_as_owner "$bin/initdb" -D "$RESILIENCE_ADMIN_PG_DIR/data" -U "$user" \
        --auth=trust -E UTF8 >"$RESILIENCE_ADMIN_PG_DIR/initdb.log" 2>&1; then
        echo "postgres.sh: initdb failed:" >&2
        cat "$RESILIENCE_ADMIN_PG_DIR/initdb.log" >&2
        pg_stop
        return 1
    fi
    if ! pg_as_owner "$bin/pg_ctl" -D "$RESILIENCE_ADMIN_PG_DIR/data" \
        -l "$RESILIENCE_ADMIN_PG_DIR/server.log" -w -t 30 \
        -o "-p $port -c listen_addresses=127.0.0.1 -k $RESILIENCE_ADMIN_PG_DIR -c fsync=off" \
        start >/dev/null 2>&1; then
        echo "postgres.sh: the server did not start; its log:" >&2
        cat "$RESILIENCE_ADMIN_PG_DIR/server.log" >&2 2>/dev/null || true
        pg_stop
        return 1
    fi
    export RESILIENCE_ADMIN_PG_URL="postgresql://$user@127.0.0.1:$port/postgres"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # Run as a command: start PostgreSQL, run the arguments, stop it.
    set -euo pipefail
    pg_start
    "$@"
else
    pg_start
fi
