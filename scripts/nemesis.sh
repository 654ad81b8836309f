#!/usr/bin/env bash
# Real faults on real processes: three `leasehold node` processes per store (PostgreSQL, etcd
# with three members, ZooKeeper), each reaching its store through a fault-injecting proxy on
# loopback, under a seeded schedule of cuts, latency, loss, pauses and kills; then the work
# log is checked for overlapping units, falling epochs, partitions left idle after the heal
# and processes that exited by themselves. See TESTING.md.
#
#   scripts/nemesis.sh            the short schedule (40 s per store), as the test suite runs it
#   scripts/nemesis.sh --long     ten minutes per store
#   NEMESIS_SEED=N scripts/nemesis.sh    replay a schedule
#
# It starts the store servers it needs and stops exactly those it started.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  --long) export NEMESIS_SECONDS=${NEMESIS_SECONDS:-600} ;;
  "") ;;
  *) echo "usage: scripts/nemesis.sh [--long]" >&2; exit 2 ;;
esac

bash scripts/services.sh install
bash scripts/services.sh stop >/dev/null 2>&1 || true
bash scripts/services.sh start
trap 'bash scripts/services.sh stop' EXIT
for env_file in .services/*.env; do
  [ -e "$env_file" ] || continue
  # shellcheck disable=SC1090
  source "$env_file"
done

# The stores' schedules run side by side in one test, the negative controls in the other: one
# test at a time, so that the controls' fleets do not load the schedules' machine as well.
cargo test --release --all-features --locked -p leasehold-cli --test nemesis -- \
  --nocapture --test-threads 1
