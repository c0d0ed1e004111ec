#!/usr/bin/env bash
# The one command that runs every test of the workspace. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings

echo "== cargo test (unit, integration, doc and trybuild ui tests)"
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --workspace --no-deps --quiet
cargo test --workspace --all-features
