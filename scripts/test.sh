#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs the build tools and store servers the
# tests need (Debian packages and npm), starts the servers on loopback, checks the alert rules
# with promtool, checks and builds the guide, runs every test of every crate with every
# feature, then the browser test of the monitor's page and the Debian package's test, and
# stops exactly the servers it started.
#
#   scripts/test.sh [--busy N] [extra cargo test arguments]
#
# Every test binary runs even when an earlier one fails; the failing tests are listed at the
# end, and the exit status is non-zero if any part failed.
#
# Without extra arguments, scripts/run_tests.py runs the built test binaries: the ones that
# wait on lease timings in LEASEHOLD_TEST_LANES lanes (2 by default) at once, and the
# simulator's, which use the CPU only, one after another beside them (built optimized).
#
# --busy N (or LEASEHOLD_TEST_BUSY=N) runs N busy loops beside the tests, from when they are
# built to the end, as other programs load a shared CI runner: a test that only passes on an
# idle machine fails here rather than on someone else's.
set -euo pipefail
cd "$(dirname "$0")/.."

busy=${LEASEHOLD_TEST_BUSY:-0}
cargo_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --busy)
      [ $# -ge 2 ] || { echo "test.sh: --busy needs a number of busy loops" >&2; exit 2; }
      busy=$2
      shift 2
      ;;
    --busy=*)
      busy=${1#--busy=}
      shift
      ;;
    *)
      cargo_args+=("$1")
      shift
      ;;
  esac
done
case "$busy" in
  '' | *[!0-9]*) echo "test.sh: --busy takes a number of busy loops, not '$busy'" >&2; exit 2 ;;
esac

bash scripts/services.sh install
bash scripts/services.sh stop >/dev/null 2>&1 || true

# The busy loops' process ids, in a file: the loops may be started from a background job.
hog_file=$(mktemp)
start_hogs() {
  local i
  for ((i = 0; i < $1; i++)); do
    (while :; do :; done) &
    echo "$!" >>"$hog_file"
  done
  [ "$1" -eq 0 ] || echo "test.sh: ${1} busy loop(s) running beside the tests from ${SECONDS}s"
}
stop_hogs() {
  [ -f "$hog_file" ] || return 0
  while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$hog_file"
  rm -f "$hog_file"
}
# Set before the servers start: one that fails to start must not leave the others running
# (holding their ports against the next run).
stop_tools() {
  if [ -n "${tools_pid:-}" ]; then kill "$tools_pid" 2>/dev/null || true; fi
}
# The tests' own files (SQLite stores, nodes' folders) in memory where the machine allows:
# a shared CI disk can stall an fsync for seconds, past the short timeouts of the tests'
# store calls, and what the tests check does not depend on the disk.
scratch=""
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  scratch=$(mktemp -d /dev/shm/leasehold-tests.XXXXXX)
fi
trap 'stop_tools; stop_hogs; bash scripts/services.sh stop; [ -z "$scratch" ] || rm -rf "$scratch"' EXIT
bash scripts/services.sh start
echo "test.sh: servers started at ${SECONDS}s"

for env_file in .services/*.env; do
  [ -e "$env_file" ] || continue
  # shellcheck disable=SC1090
  source "$env_file"
done
# A test that needs a missing server or tool fails, naming how to install it, rather than
# passing without having checked anything.
export LEASEHOLD_SKIP_SERVICES=0

failed=()
# No import circle, no planner rule grown past a screen: read from the sources, in a moment.
python3 scripts/structure.py || failed+=("scripts/structure.py")
# The Rust version the crates state covers every crate they build from.
python3 scripts/check_msrv.py || failed+=("scripts/check_msrv.py")
# Before the crates' tests: it installs promtool, which the metrics tests use too.
bash scripts/promtool-test.sh || failed+=("scripts/promtool-test.sh")

# The simulator's tests are deterministic and use the CPU only, where the rest mostly wait
# on lease timings in real time: without extra arguments they run beside the rest, as one
# more load on the machine, rather than after it. Their package alone gives the core other
# features, hence a build of its own. Extra arguments go to one `cargo test` of the whole
# workspace instead.
split=0
[ ${#cargo_args[@]} -gt 0 ] || split=1
# Built first, so that busy loops slow the tests and not the compiler: exactly what each
# run below selects. The whole workspace resolves the core's features differently from
# either run, so a build of it would leave the tests' own build for when they start. The
# simulator's tests build in their own lane, optimized (the `sim-test` profile), beside the
# rest.
if [ "$split" -eq 1 ]; then
  cargo test --workspace --exclude leasehold-sim --all-features --locked --no-run
else
  cargo test --workspace --all-features --locked --no-run "${cargo_args[@]}"
fi
echo "test.sh: tests built at ${SECONDS}s"
# mdBook and cargo-deb, for the guide and the package once the test binaries have run:
# compiled (when missing) at the lowest priority while the tests run.
tools_log=$(mktemp)
nice -n 19 bash scripts/tools.sh mdbook cargo-deb >"$tools_log" 2>&1 &
tools_pid=$!

# Adds the failures of a `cargo test` run, from its log and exit status, to `failed`.
collect_failures() {
  local log=$1 status=$2
  [ "$status" -ne 0 ] || return 0
  # `test name ... FAILED` lines, per test binary, and the binaries that failed as a whole.
  mapfile -t tests < <(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u)
  failed+=("${tests[@]/#/cargo test: }")
  mapfile -t targets < <(sed -n '/^error: [0-9]* targets* failed:/,/^[^ ]/p' "$log" | grep -E '^    ' | sed -E 's/^ +//')
  failed+=("${targets[@]/#/failed test binary: }")
  [ ${#tests[@]} -gt 0 ] || [ ${#targets[@]} -gt 0 ] || failed+=("cargo test exited with status $status")
}

set +e
# Set only now: the compilers above keep their temporary files where they were.
[ -z "$scratch" ] || export TMPDIR="$scratch"
start_hogs "$busy"
if [ "$split" -eq 1 ]; then
  failures_file=$(mktemp)
  # The guide: its links, runbooks and build. The binary the tests built: the monitor's page
  # in a browser, and the Debian package installed, run and removed (one job: both may
  # install Debian packages, which cannot happen twice at once).
  python3 scripts/run_tests.py --lanes "${LEASEHOLD_TEST_LANES:-2}" --serial-package leasehold-sim --serial-profile sim-test \
    --job "scripts/docs.sh=bash scripts/docs.sh" \
    --job "scripts/browser-test.sh, scripts/package-test.sh=bash scripts/browser-test.sh && bash scripts/package-test.sh" \
    --revive "bash scripts/services.sh revive" \
    --failures "$failures_file" -- --all-features --locked
  status=$?
  mapfile -t binaries <"$failures_file"
  failed+=("${binaries[@]}")
  [ "$status" -eq 0 ] || [ ${#binaries[@]} -gt 0 ] || failed+=("scripts/run_tests.py exited with status $status")
  rm -f "$failures_file"
else
  log=$(mktemp)
  cargo test --workspace --all-features --locked --no-fail-fast "${cargo_args[@]}" 2>&1 | tee "$log"
  collect_failures "$log" "${PIPESTATUS[0]}"
  rm -f "$log"
  bash scripts/docs.sh || failed+=("scripts/docs.sh")
  bash scripts/browser-test.sh || failed+=("scripts/browser-test.sh")
  bash scripts/package-test.sh || failed+=("scripts/package-test.sh")
fi
echo "test.sh: tests run at ${SECONDS}s"
set -e
stop_hogs

if ! wait "$tools_pid"; then
  cat "$tools_log"
  failed+=("scripts/tools.sh mdbook cargo-deb")
fi
rm -f "$tools_log"

if [ ${#failed[@]} -gt 0 ]; then
  echo
  echo "test.sh: ${#failed[@]} failure(s):"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "test.sh: every test passed"
