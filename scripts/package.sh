#!/usr/bin/env bash
# The published crates as users get them: `cargo package` builds each of
# resilience-macros, resilience-runtime and resilience-admin from its own tarball
# (so a file outside a crate's folder, or an undeclared dependency, fails here), then
# a crate outside the workspace (scripts/package-smoke) depends on those packages,
# not on the source tree, and runs the README's first example and an isolated test.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo package (each published crate built from its own package)"
# `--allow-dirty`: a local run with uncommitted changes packages them as they are (a
# clean clone, as CI's, has none).
cargo package -q --allow-dirty -p resilience-macros -p resilience-runtime -p resilience-admin

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
# `cargo package` writes into the target directory (CARGO_TARGET_DIR if set).
packages="${CARGO_TARGET_DIR:-$PWD/target}/package"
smoke="scripts/package-smoke"
# Patched in by path to the unpacked packages cargo just verified.
config=(
    --config "patch.crates-io.resilience-runtime.path=\"$packages/resilience-runtime-$version\""
    --config "patch.crates-io.resilience-macros.path=\"$packages/resilience-macros-$version\""
)
echo "== package smoke: the README's first example and an isolated test, from the packages"
export CARGO_TARGET_DIR="$PWD/target/package-smoke"
(cd "$smoke" && cargo run -q "${config[@]}" && cargo test -q "${config[@]}")
