#!/usr/bin/env bash
# Instructions per guarded call, counted by callgrind (the one cost figure a noisy
# machine cannot move), against the budgets in checks/instructions.txt: fails if any
# path costs more than its budget. Installs valgrind (Debian) if it is missing.
#
# Each path runs `hot_calls PATH N` twice (N = 2 000 and 22 000) in a release build;
# the difference over 20 000 calls is the count of one call, with the set-up and the
# first call's work cancelled out (see checks/src/bin/hot_calls.rs).
#
# To raise a budget on purpose (a change that must cost more), run
#   bash scripts/instructions.sh --update
# which rewrites checks/instructions.txt with each path's count plus 3 %, and say why
# in the commit that changes it. To see where the instructions go:
#   CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release -p checks --bin hot_calls
#   valgrind --tool=callgrind --toggle-collect='*hot_loop*' target/release/hot_calls all_five 20000
#   callgrind_annotate --auto=yes callgrind.out.*
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ]; then
        echo "== installing valgrind (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
    else
        echo "instructions.sh: valgrind is not installed (Debian: apt-get install valgrind)" >&2
        exit 1
    fi
fi

budgets="checks/instructions.txt"
cargo build -q --release -p checks --bin hot_calls
bin="${CARGO_TARGET_DIR:-target}/release/hot_calls"

count() { # path calls -> instructions collected inside hot_loop
    valgrind --tool=callgrind --toggle-collect='*hot_loop*' --callgrind-out-file=/dev/null \
        "$bin" "$1" "$2" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

update=${1:-}
failed=0
out=""
while read -r path budget _; do
    case "$path" in ''|'#'*) continue ;; esac
    a=$(count "$path" 2000)
    b=$(count "$path" 22000)
    per=$(( (b - a) / 20000 ))
    if [ "$update" = "--update" ]; then
        budget=$(( per + (per * 3 + 99) / 100 ))
    fi
    verdict="ok"
    if [ "$per" -gt "$budget" ]; then
        verdict="OVER BUDGET"
        failed=1
    fi
    printf '  %-16s %5d instructions per call (budget %d) %s\n' "$path" "$per" "$budget" "$verdict"
    out+="$path $budget"$'\n'
done < <(grep -v '^#' "$budgets")

if [ "$update" = "--update" ]; then
    { grep '^#' "$budgets"; printf '%s' "$out"; } > "$budgets.new"
    mv "$budgets.new" "$budgets"
    echo "instructions.sh: budgets rewritten in $budgets"
fi
if [ "$failed" -ne 0 ]; then
    echo "instructions.sh: a guarded path costs more instructions than its budget:" \
        "find what it now does (see the comments at the top of this script), or" \
        "raise the budget on purpose with --update and say why" >&2
    exit 1
fi
