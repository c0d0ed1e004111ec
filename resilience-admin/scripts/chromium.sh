#!/usr/bin/env bash
# Chromium and ChromeDriver for resilience-admin's dashboard test (tests/dashboard.rs).
#
# Sourced by scripts/test.sh: installs Debian's `chromium` and `chromium-driver` with
# apt-get when they are missing (as root on Debian). Nothing is started here: the test
# starts ChromeDriver itself. RESILIENCE_CHROMIUM / RESILIENCE_CHROMEDRIVER can point
# at other binaries.

chromium_install() {
    if [ -x "${RESILIENCE_CHROMIUM:-/usr/bin/chromium}" ] &&
        [ -x "${RESILIENCE_CHROMEDRIVER:-/usr/bin/chromedriver}" ]; then
        return 0
    fi
    if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
        echo "chromium.sh: chromium and chromedriver are not installed; install them" \
            "(Debian: apt-get install chromium chromium-driver)" >&2
        return 1
    fi
    echo "== installing chromium and chromium-driver (apt-get)"
    local log="${TMPDIR:-/tmp}/resilience-chromium-apt.log"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            chromium chromium-driver; } >"$log" 2>&1; then
        echo "chromium.sh: installing chromium failed:" >&2
        cat "$log" >&2
        return 1
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    chromium_install
else
    chromium_install
fi
