#!/usr/bin/env bash
# A throw-away Redis Cluster for the Redis tests (feature `redis`).
#
# Sourced (scripts/test.sh does this, after scripts/redis.sh): makes sure
# `redis-server`, `redis-cli` and `openssl` are installed (apt-get on Debian, as
# root), starts 3 masters and 3 replicas with `cluster-enabled yes` on 127.0.0.1,
# ports ${RESILIENCE_REDIS_CLUSTER_PORT:-6400} to that + 5, without persistence,
# joins them with `redis-cli --cluster create`, waits until every node says
# `cluster_state:ok` and every replica has synced, exports
#   RESILIENCE_REDIS_CLUSTER_URL=redis+cluster://127.0.0.1:P,127.0.0.1:P+1,127.0.0.1:P+2/
# (the three masters as seeds) and stops the nodes and deletes their files when the
# sourcing shell exits, pass or fail. An EXIT trap set before (scripts/redis.sh's) is
# kept: ours runs first, then it.
#
# Run directly, it does the same around one command:
#   scripts/redis-cluster.sh cargo test -p resilience-runtime --features redis --test redis_cluster
#
# If RESILIENCE_REDIS_CLUSTER_URL is already set, that cluster is used and nothing is
# started.

RESILIENCE_REDIS_CLUSTER_PORT="${RESILIENCE_REDIS_CLUSTER_PORT:-6400}"
RESILIENCE_REDIS_CLUSTER_DIR=""
RESILIENCE_REDIS_CLUSTER_PIDS=()

# openssl too: the TLS test (feature `redis-tls`) makes its certificates with it.
redis_cluster_install() {
    command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 &&
        command -v openssl >/dev/null 2>&1 && return 0
    if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
        echo "redis-cluster.sh: redis-server, redis-cli and openssl are needed; install them (Debian: apt-get install redis-server openssl)" >&2
        return 1
    fi
    echo "== installing redis-server, redis-cli and openssl (apt-get)"
    local log="${TMPDIR:-/tmp}/resilience-redis-cluster-apt.log"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            redis-server redis-tools openssl; } >"$log" 2>&1; then
        echo "redis-cluster.sh: installing redis-server failed:" >&2
        cat "$log" >&2
        return 1
    fi
}

redis_cluster_stop() {
    local pid
    for pid in "${RESILIENCE_REDIS_CLUSTER_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${RESILIENCE_REDIS_CLUSTER_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    RESILIENCE_REDIS_CLUSTER_PIDS=()
    if [ -n "$RESILIENCE_REDIS_CLUSTER_DIR" ]; then
        rm -rf "$RESILIENCE_REDIS_CLUSTER_DIR"
        RESILIENCE_REDIS_CLUSTER_DIR=""
    fi
}

# Adds redis_cluster_stop in front of whatever EXIT trap is already set.
redis_cluster_chain_exit_trap() {
    local current
    current=$(trap -p EXIT)
    if [ -n "$current" ]; then
        # `trap -p` prints `trap -- 'COMMAND' EXIT`; eval splits it back into words.
        eval "set -- $current"
        trap "redis_cluster_stop; $3" EXIT
    else
        trap redis_cluster_stop EXIT
    fi
}

redis_cluster_fail() {
    echo "redis-cluster.sh: $1; the nodes' logs:" >&2
    tail -n 20 "$RESILIENCE_REDIS_CLUSTER_DIR"/*.log >&2 2>/dev/null || true
    redis_cluster_stop
    return 1
}

redis_cluster_start() {
    if [ -n "${RESILIENCE_REDIS_CLUSTER_URL:-}" ]; then
        echo "== using the Redis Cluster at RESILIENCE_REDIS_CLUSTER_URL=$RESILIENCE_REDIS_CLUSTER_URL"
        return 0
    fi
    redis_cluster_install || return 1
    local base="$RESILIENCE_REDIS_CLUSTER_PORT" port i
    local ports=()
    for i in 0 1 2 3 4 5; do
        port=$((base + i))
        # A Redis Cluster node also listens on its port + 10000 (the cluster bus).
        if redis-cli -p "$port" PING >/dev/null 2>&1; then
            echo "redis-cluster.sh: something already answers on 127.0.0.1:$port; stop it, or set RESILIENCE_REDIS_CLUSTER_PORT" >&2
            return 1
        fi
        ports+=("$port")
    done
    RESILIENCE_REDIS_CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/resilience-redis-cluster.XXXXXX")
    redis_cluster_chain_exit_trap
    echo "== starting a Redis Cluster (3 masters, 3 replicas) on 127.0.0.1:${ports[0]}-${ports[5]}"
    for port in "${ports[@]}"; do
        # A node is failed over after 2 s without an answer (the default is 15 s).
        redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
            --cluster-enabled yes --cluster-node-timeout 2000 \
            --cluster-require-full-coverage no --repl-diskless-sync-delay 0 \
            --cluster-config-file "nodes-$port.conf" \
            --daemonize no --loglevel warning \
            --logfile "$RESILIENCE_REDIS_CLUSTER_DIR/$port.log" \
            --dir "$RESILIENCE_REDIS_CLUSTER_DIR" </dev/null >/dev/null 2>&1 &
        RESILIENCE_REDIS_CLUSTER_PIDS+=($!)
    done
    for port in "${ports[@]}"; do
        for i in $(seq 1 100); do # up to ~10 s each
            redis-cli -p "$port" PING >/dev/null 2>&1 && break
            if [ "$i" -eq 100 ]; then
                redis_cluster_fail "node 127.0.0.1:$port did not answer PING within 10 s"
                return 1
            fi
            sleep 0.1
        done
    done
    local nodes=()
    for port in "${ports[@]}"; do nodes+=("127.0.0.1:$port"); done
    if ! redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
        >"$RESILIENCE_REDIS_CLUSTER_DIR/create.log" 2>&1; then
        cat "$RESILIENCE_REDIS_CLUSTER_DIR/create.log" >&2
        redis_cluster_fail "redis-cli --cluster create failed"
        return 1
    fi
    # Every node must know every slot's master, and every replica hold its master's
    # data, before the tests start.
    for i in $(seq 1 200); do # up to ~20 s
        local ok=1
        for port in "${ports[@]}"; do
            redis-cli -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
            if redis-cli -p "$port" INFO replication 2>/dev/null | grep -q '^role:slave'; then
                redis-cli -p "$port" INFO replication | grep -q '^master_link_status:up' || ok=0
            fi
        done
        if [ "$ok" -eq 1 ]; then
            export RESILIENCE_REDIS_CLUSTER_URL="redis+cluster://${nodes[0]},${nodes[1]},${nodes[2]}/"
            return 0
        fi
        sleep 0.1
    done
    redis_cluster_fail "the cluster did not reach cluster_state:ok within 20 s"
    return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    # Run as a command: start the cluster, run the arguments, stop the cluster.
    set -euo pipefail
    redis_cluster_start
    "$@"
else
    redis_cluster_start
fi
