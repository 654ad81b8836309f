#!/usr/bin/env bash
# The fleet benchmark (`leasehold bench`) on one of the stores this project can start on
# loopback: real node processes through cold start, crash, pause, leave, replace, join and a
# rolling restart. For your own store, run `leasehold --store URL --group NAME bench` instead.
#
#   scripts/bench.sh sqlite|postgres|etcd|zookeeper|azure [bench flags...]
#
# For example: scripts/bench.sh postgres --runs 20 --json > postgres.json
#
# Every store but SQLite is installed and started with scripts/services.sh if it is not
# running, and stopped again afterwards only if this script started it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

store=${1:-}
case "$store" in
  sqlite|postgres|etcd|zookeeper|azure) shift ;;
  *) echo "usage: $0 sqlite|postgres|etcd|zookeeper|azure [bench flags...]" >&2; exit 2 ;;
esac

features=()
[ "$store" = etcd ] && features=(--features etcd)
cargo build --release --locked -p leasehold-cli "${features[@]}"
leasehold="${CARGO_TARGET_DIR:-$root/target}/release/leasehold"

service=$store
[ "$store" = azure ] && service=azurite
started=
if [ "$store" != sqlite ]; then
  if ! bash scripts/services.sh status "$service" >/dev/null 2>&1; then
    bash scripts/services.sh install "$service"
    bash scripts/services.sh start "$service"
    started=1
  fi
  # shellcheck disable=SC1090
  source ".services/$service.env"
fi
scratch=$(mktemp -d)
cleanup() {
  rm -rf "$scratch"
  if [ -n "$started" ]; then bash scripts/services.sh stop "$service"; fi
}
trap cleanup EXIT

# A group of its own per invocation, so that a run never meets another's records.
group="bench-$(date +%s)-$$"
case "$store" in
  sqlite) url="sqlite://$scratch/bench.db" ;;
  postgres) url="$LEASEHOLD_TEST_POSTGRES_URL" ;;
  etcd) url="etcd://${LEASEHOLD_TEST_ETCD_ENDPOINTS}/leasehold-bench" ;;
  zookeeper) url="zk://${LEASEHOLD_TEST_ZOOKEEPER}/leasehold-bench" ;;
  azure)
    export LEASEHOLD_AZURE_KEY="$LEASEHOLD_TEST_AZURITE_KEY"
    url="azure+http://${LEASEHOLD_TEST_AZURITE_ENDPOINT#http://}/benchleases"
    ;;
esac
"$leasehold" --store "$url" --group "$group" bench "$@"
