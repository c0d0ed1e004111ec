#!/usr/bin/env bash
# The admin demo: resilience-admin on SQLite and two instances of a demo service
# (examples/admin_demo.rs) reporting to it.
#
#   scripts/admin-demo.sh            run until Ctrl-C; follow the printed steps
#   scripts/admin-demo.sh --smoke    make the policy edit through the API instead of
#                                    the browser, check that both instances obey
#                                    within one pull period (5 s), and stop
#
# The database is target/admin-demo/admin.db: stop the demo and start it again, and the
# policy history is still there. RESILIENCE_DEMO_PORT changes the port (default 7070).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${RESILIENCE_DEMO_PORT:-7070}"
ADMIN_TOKEN="${RESILIENCE_ADMIN_TOKEN:-demo-admin-token-0123456789}"
APP_TOKEN="${RESILIENCE_APP_TOKEN:-demo-app-token-0123456789}"
TARGET="${CARGO_TARGET_DIR:-target}"
DEMO_DIR="target/admin-demo"
SMOKE=false
DB="$DEMO_DIR/admin.db"
CACHE="$DEMO_DIR/a-cache.json"
mkdir -p "$DEMO_DIR"
if [ "${1:-}" = "--smoke" ]; then
    # A database of its own, so the smoke run leaves the demo's history alone.
    SMOKE=true
    DB="$DEMO_DIR/smoke.db"
    CACHE="$DEMO_DIR/smoke-a-cache.json"
    rm -f "$DB" "$DB-wal" "$DB-shm" "$CACHE"
fi
if ! command -v curl >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
        echo "== installing curl (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl >/dev/null
    else
        echo "admin-demo: needs curl (Debian: apt-get install curl)" >&2
        exit 1
    fi
fi
echo "== building"
cargo build -q -p resilience-admin
cargo build -q -p examples --example admin_demo

PIDS=()
demo_stop() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
trap demo_stop EXIT
trap 'exit 130' INT TERM

echo "== starting resilience-admin on 127.0.0.1:$PORT (SQLite file $DB)"
RESILIENCE_ADMIN_TOKEN="$ADMIN_TOKEN" RESILIENCE_APP_TOKENS="$APP_TOKEN" \
    "$TARGET/debug/resilience-admin" --bind "127.0.0.1:$PORT" --db "$DB" \
    >"$DEMO_DIR/admin.log" 2>&1 &
PIDS+=($!)
URL="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do
    curl -fsS "$URL/api/v1/health" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "$URL/api/v1/health" >/dev/null || { cat "$DEMO_DIR/admin.log"; exit 1; }

api() { # METHOD PATH [JSON]
    curl -sS -X "$1" -H "Authorization: Bearer $ADMIN_TOKEN" \
        -H "Content-Type: application/json" ${3:+--data "$3"} "$URL$2"
}

# A first policy, if the app has none yet: each instance admits at most 1500 calls
# per sliding 10 s; at 200 calls/s that downgrades about a quarter of them.
POLICY=/api/v1/apps/demo/shop/policy
VERSION=$(api GET "$POLICY" | sed -E 's/.*"version":([0-9]+).*/\1/')
if [ "$VERSION" = "0" ]; then
    api PUT "$POLICY" '{"base_version": 0, "author": "demo", "comment": "first limit",
        "policy": {"points": {"demo.checkout": {"max_visits": 1500}}}}' >/dev/null
    VERSION=1
fi

# Instance b also has a local policy file: a breaker and a window for demo.checkout
# (the console sets only its rules, so both layers are in force side by side) and a
# concurrency limit for demo.refund, which the console does not configure at all.
B_FILE="$DEMO_DIR/b-policies.toml"
cat >"$B_FILE" <<'TOML'
[points."demo.checkout".window]
buckets = 20
bucket_width = "500ms"

[points."demo.checkout".breaker]
algorithm = "classic"
failure_rate = 0.5

[points."demo.refund"]
max_concurrency = 4
TOML

echo "== starting two instances of the demo service (200 calls/s each):"
echo "   a takes everything from the console; b also watches $B_FILE"
RESILIENCE_APP_TOKEN="$APP_TOKEN" "$TARGET/debug/examples/admin_demo" \
    --server "$URL" --instance a --cache "$CACHE" \
    >"$DEMO_DIR/a.log" 2>&1 &
PIDS+=($!)
RESILIENCE_APP_TOKEN="$APP_TOKEN" "$TARGET/debug/examples/admin_demo" \
    --server "$URL" --instance b --policy-file "$B_FILE" \
    >"$DEMO_DIR/b.log" 2>&1 &
PIDS+=($!)
tail -n 0 -f "$DEMO_DIR/a.log" "$DEMO_DIR/b.log" &
PIDS+=($!)

if ! $SMOKE; then
    cat <<TXT

== the demo is running (Ctrl-C stops everything)
1. Open the dashboard:  $URL/#token=$ADMIN_TOKEN
2. Pick app demo/shop and click the point demo.checkout: within 20 s the charts show
   visits, passes and "visits" downgrades (each instance admits 1500 per 10 s).
3. In the policy form set max_visits to 3000, enter your name, and press Save.
4. Within one pull period (5 s) both instances print "policy v$((VERSION + 1))" and
   their downgrades stop; the dashboard's instance table shows the new version.
5. History: "Restore" on an older version rolls back, and both instances follow.
6. Side by side: a's lines say "sources: rules=console@N", b's add
   "window=file:...@1 breaker=file:...@1" from its file. In the dashboard, b's
   demo.checkout is flagged as drift (local sections in force beside the console's)
   and its local text is one click away; demo.refund is enforced by b's file alone.

TXT
    wait "${PIDS[0]}"
    exit 0
fi

# --smoke: let the instances pull, change the policy, check both obey in time.
sleep 8
NEXT=$((VERSION + 1))
api PUT "$POLICY" "{\"base_version\": $VERSION, \"author\": \"smoke\",
    \"policy\": {\"points\": {\"demo.checkout\": {\"max_visits\": 100000}}}}" >/dev/null
EDITED=$(date +%s%N)
for instance in a b; do
    until grep -q "policy v$NEXT " "$DEMO_DIR/$instance.log"; do
        if [ $(( ($(date +%s%N) - EDITED) / 1000000 )) -gt 7000 ]; then
            echo "admin-demo: instance $instance did not get version $NEXT within 7 s" >&2
            exit 1
        fi
        sleep 0.1
    done
done
echo "== both instances hold version $NEXT, $(( ($(date +%s%N) - EDITED) / 1000000 )) ms after the edit"
# Side by side: a takes everything from the console, b keeps its file's sections.
tail -n 1 "$DEMO_DIR/a.log" | grep -q "sources: rules=console@$NEXT\$" || {
    echo "admin-demo: instance a does not take its rules from console v$NEXT: $(tail -n 1 "$DEMO_DIR/a.log")" >&2
    exit 1
}
tail -n 1 "$DEMO_DIR/b.log" | grep -q "rules=console@$NEXT window=file:.*breaker=file:" || {
    echo "admin-demo: instance b lost its file's sections: $(tail -n 1 "$DEMO_DIR/b.log")" >&2
    exit 1
}
echo "== a enforces the console only; b the console's rules beside its file's window and breaker"
sleep 2
if tail -n 1 "$DEMO_DIR/a.log" | grep -q "downgraded: none"; then
    echo "== and no call of instance a is downgraded any more"
else
    echo "admin-demo: instance a is still downgraded: $(tail -n 1 "$DEMO_DIR/a.log")" >&2
    exit 1
fi
