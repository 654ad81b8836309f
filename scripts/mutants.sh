#!/usr/bin/env bash
# Mutation testing of the core's decision code: the planner and its scan schedule, the
# lease loop (every file of participant/, guards and work permits included), the group
# record, the configuration's checks, the router, and the operator actions. cargo-mutants
# changes one thing at a time (a comparison flipped, a return value replaced, a branch
# removed) and runs the core's tests against each change; a mutant the tests still pass
# ("missed") is behaviour no test pins down.
#
# Far too slow for CI on two cores (several hundred mutants, tens of seconds each): run it in
# the background, in shards, or on what changed since a revision:
#
#   scripts/mutants.sh                       everything, one mutant at a time
#   scripts/mutants.sh --shard 0/4           the first quarter (then 1/4, 2/4, 3/4)
#   scripts/mutants.sh --in-diff <(git diff main~5)   only code a diff touches
#   scripts/mutants.sh --list                the mutants, without running them
#   scripts/mutants.sh --shard 0/8 --jobs 2  two mutants at a time (their tests mostly wait)
#   scripts/mutants.sh --iterate             go on with a whole run that was stopped (not a
#                                            shard: --iterate leaves out what was caught
#                                            before sharding, so a shard's share changes)
#
# Results go to target/mutants/<shard or "all">/mutants.out (caught.txt, missed.txt,
# timeout.txt, unviable.txt); a summary line is printed at the end. Record it in MUTANTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-mutants >/dev/null 2>&1; then
  cargo install --locked cargo-mutants@27.1.0
fi

name=all
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = "--shard" ] && [ $((i + 1)) -lt ${#args[@]} ]; then
    name="shard-${args[$((i + 1))]//\//-of-}"
  fi
done
output="target/mutants/$name"
mkdir -p "$output"

# The unit and integration tests of the core, without doctests (slow to build, and every
# behaviour they show is tested elsewhere): what exercises the files below. nextest runs
# them side by side; most of their time is spent waiting on lease timings in real time (the
# conformance tests of the in-memory store), so more of them run at once than there are
# cores: a mutant's tests take about as long as the slowest one, about 9 s instead of 20.
tool=()
if command -v cargo-nextest >/dev/null 2>&1; then
  tool=(--test-tool nextest)
  export NEXTEST_TEST_THREADS="${NEXTEST_TEST_THREADS:-8}"
fi
# Tests of two mutants at once on two cores take several times their baseline, and a
# limit of three baselines (about 30 s) turns caught and missed mutants alike into
# timeouts; a floor of 90 s still stops a mutant that loops forever within two minutes.
# The "mutants" profile (Cargo.toml) builds without debug information: the same code,
# linked faster.
status=0
cargo mutants "${tool[@]}" \
  --package leasehold \
  --features testing \
  --file 'crates/leasehold/src/planner.rs' \
  --file 'crates/leasehold/src/planner/**/*.rs' \
  --file 'crates/leasehold/src/participant/*.rs' \
  --file 'crates/leasehold/src/group.rs' \
  --file 'crates/leasehold/src/config.rs' \
  --file 'crates/leasehold/src/config/*.rs' \
  --file 'crates/leasehold/src/router/*.rs' \
  --file 'crates/leasehold/src/admin.rs' \
  --file 'crates/leasehold/src/admin/*.rs' \
  --exclude '**/tests.rs' \
  --exclude '**/tests/*.rs' \
  --profile mutants \
  --timeout-multiplier 3 \
  --minimum-test-timeout "${MUTANTS_MIN_TIMEOUT:-90}" \
  --output "$output" \
  --cargo-test-arg=--lib \
  --cargo-test-arg=--tests \
  "$@" || status=$?

out="$output/mutants.out"
if [ -d "$out" ]; then
  count() { [ -f "$out/$1" ] && wc -l < "$out/$1" | tr -d ' ' || echo 0; }
  echo "mutants ($name, $(date -u +%Y-%m-%d)): $(count caught.txt) caught, $(count missed.txt) missed, $(count timeout.txt) timed out, $(count unviable.txt) unviable"
fi
# cargo-mutants exits 2 when mutants were missed and 3 when some timed out: a finding to
# read, not a failure of the script.
case $status in 0 | 2 | 3) exit 0 ;; *) exit "$status" ;; esac
