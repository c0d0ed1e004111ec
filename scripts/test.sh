#!/usr/bin/env bash
# The one command that runs every test of the workspace. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
# Each feature of the runtime alone builds without a warning (dead code hides behind
# feature combinations that the all-features run never sees).
for features in "" redis redis-tls config heartbeat heartbeat-tls prometheus metrics opentelemetry tower tonic tracing macros tokio testing; do
    cargo clippy -q -p resilience-runtime --no-default-features --features "$features" -- -D warnings
done
# Every crate's tests and benches build with the default features as well: what a
# contributor's `cargo test -p <crate>` compiles (a test needing a feature names it in
# Cargo.toml's `required-features`).
cargo clippy -q --workspace --all-targets -- -D warnings

echo "== cargo test (unit, integration, doc and trybuild ui tests)"
# With every feature (as docs.rs builds it) every intra-doc link is checked; the
# default build checks the rest (a link to another feature's item is allowed there).
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --quiet --all-features
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --quiet
# The Redis tests need a real server: install, start and export RESILIENCE_REDIS_URL
# (stopped on exit, pass or fail).
source scripts/redis.sh
# The Redis Cluster tests need a real cluster: 3 masters and 3 replicas on
# 127.0.0.1:6400-6405 (RESILIENCE_REDIS_CLUSTER_PORT moves them), exported as
# RESILIENCE_REDIS_CLUSTER_URL and stopped on exit, before the Redis trap above.
source scripts/redis-cluster.sh
# resilience-admin: Chromium and ChromeDriver for the dashboard test, and a throw-away
# PostgreSQL for the `postgres` feature (exports RESILIENCE_ADMIN_PG_URL; stopped on
# exit, before the Redis trap above, which it keeps).
source resilience-admin/scripts/chromium.sh
source resilience-admin/scripts/postgres.sh
# checks' rust-version test reads every locked package offline (`cargo metadata
# --offline`), the other platforms' too (ring's windows-sys): fetch them all first.
cargo fetch --locked --quiet
cargo test --workspace --all-features
# Without the `redis` feature, policy files name the `cluster` section as needing it.
cargo test -p resilience-runtime --no-default-features --features config,macros --test config
# Without `heartbeat-tls`, an https address is a configuration error naming the feature.
cargo test -p resilience-runtime --no-default-features --features heartbeat --lib heartbeat
# The compile errors' messages, checked without the runtime's `tracing` feature (the
# run above compiled every pass case with it).
cargo test -p ui-tests
# Without the runtime's `tokio` feature, `timeout = "..."` is a compile error asking for it.
cargo test -p ui-tests --no-default-features
# Instructions per guarded call (callgrind) against their committed budgets.
echo "== instructions per guarded call"
bash scripts/instructions.sh
# Each published crate built from its own package, and a crate outside the
# workspace that depends on the packages runs the README's first example and an
# isolated test.
bash scripts/package.sh
# The fleet demo end to end: the admin and two instances (one from the console only,
# one with a local policy file beside it), a policy edit, both obeying within a pull.
echo "== admin demo (smoke)"
RESILIENCE_DEMO_PORT="${RESILIENCE_DEMO_PORT:-17070}" bash scripts/admin-demo.sh --smoke >/dev/null
# The per-tenant example: each tenant limited on its own over real HTTP.
echo "== per-tenant example (smoke)"
out=$(cargo run -q -p examples --example per_tenant)
grep -q "^acme           8 requests: 5 answered" <<<"$out" || { echo "$out"; exit 1; }
grep -q "^tenant-banned  8 requests: 0 answered" <<<"$out" || { echo "$out"; exit 1; }
# A real overload over loopback HTTP, short: at 4x its capacity, every protection
# beats none on goodput and the priority row serves most critical requests (loose
# bars: a debug build on a busy host; `scripts/overload.sh` runs the full table).
echo "== overload example (smoke)"
out=$(bash scripts/overload.sh --smoke) || { echo "$out"; exit 1; }
