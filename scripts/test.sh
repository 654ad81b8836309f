#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs the build tools and store servers the
# tests need (Debian packages and npm), starts the servers on loopback, checks the alert rules
# with promtool, runs every test of every crate with every feature, then the browser test of
# the monitor's page, and stops exactly the servers it started.
#
#   scripts/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/services.sh install
bash scripts/services.sh stop >/dev/null 2>&1 || true
bash scripts/services.sh start
trap 'bash scripts/services.sh stop' EXIT

for env_file in .services/*.env; do
  [ -e "$env_file" ] || continue
  # shellcheck disable=SC1090
  source "$env_file"
done

# Before the crates' tests: it installs promtool, which the metrics tests use too.
bash scripts/promtool-test.sh
cargo test --workspace --all-features --locked "$@"
# The binary the tests above built.
bash scripts/browser-test.sh
