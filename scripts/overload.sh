#!/usr/bin/env bash
# A real overload, measured (examples/overload.rs): an axum service on loopback whose
# backend serves 8 requests of 20 ms at a time (400/s), driven by an open-loop client at
# 1x, 2x and 4x that rate with no protection, tower's ConcurrencyLimit + LoadShed, a
# PointLayer with a bounded queue, and a PointLayer with the gradient limit (alone, with
# priorities for the 20% critical requests, and with priorities and a short queue).
# About a minute and a half; loopback only.
#
#   scripts/overload.sh                 the table (release build), and the chart in
#                                       target/overload.svg
#   scripts/overload.sh --smoke         4x only, ~30 s, with checks (debug build)
#   scripts/overload.sh -- --secs 5     more time per row (arguments after -- go to the
#                                       example)
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--smoke" ]]; then
    shift
    exec cargo run -q -p examples --example overload -- --smoke "$@"
fi
[[ "${1:-}" == "--" ]] && shift
TARGET="${CARGO_TARGET_DIR:-target}"
mkdir -p "$TARGET"
exec cargo run -q --release -p examples --example overload -- --svg "$TARGET/overload.svg" "$@"
