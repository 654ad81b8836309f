#!/usr/bin/env bash
# Browser test of the `leasehold monitor` page: installs what is missing (Debian's chromium,
# the pinned npm packages of tests/browser), then runs tests/browser/monitor.mjs against an
# already built leasehold binary. Exits non-zero when the test fails.
#
#   cargo build -p leasehold-cli && scripts/browser-test.sh
#
# LEASEHOLD_BIN chooses the binary; otherwise $CARGO_TARGET_DIR/debug/leasehold, or
# target/debug/leasehold. Screenshots go to browser/ in that target directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# Paths given relative to the caller's directory are resolved before leaving it.
target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
bin=${LEASEHOLD_BIN:-$target_dir/debug/leasehold}
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
if [ ! -x "$bin" ]; then
  echo "browser-test: no leasehold binary at $bin: run cargo build -p leasehold-cli, or set LEASEHOLD_BIN" >&2
  exit 2
fi

export SERVICES_DIR="$root/.services"
mkdir -p "$SERVICES_DIR"
# shellcheck source=services/common.sh
source "$root/scripts/services/common.sh"
apt_install chromium
command -v node >/dev/null || apt_install nodejs
if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  echo "browser-test: playwright-core needs Node 20 or later; this is $(node --version)" >&2
  exit 2
fi

cd "$root/tests/browser"
# npm ls fails when a package is missing or is not the version the lock pins.
if ! npm ls --loglevel=silent >/dev/null 2>&1; then
  echo "browser-test: npm ci in tests/browser"
  npm ci --no-audit --no-fund --loglevel=error
fi

LEASEHOLD_BIN="$bin" LEASEHOLD_BROWSER_OUT="$target_dir/browser" CHROMIUM=/usr/bin/chromium \
  node monitor.mjs
