#!/usr/bin/env bash
# Installs the build tools the guide and the package need, from crates.io, at the versions
# tested here, when they are missing or at another version:
#
#   scripts/tools.sh mdbook cargo-deb
#
# A cold install compiles them (a few minutes of CPU); test.sh runs it at low priority while
# the tests, which mostly wait on lease timings, leave the cores idle, and CI starts it at
# the same priority before it compiles anything. Two runs at once install once: the second
# waits for the first, then finds the tools there.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p target
exec 9>target/tools.lock
# A run that has to wait for another's low-priority install raises that install to its own
# priority: beside programs that keep the cores busy at normal priority, a build at nice 19
# gets about one part in seventy of a core and would hold the waiting run for hours.
# Raising a priority needs root; without it the wait is as long as it is.
if ! flock -n 9; then
  holder=$(cat target/tools.pid 2>/dev/null || true)
  if [ -n "$holder" ] && grep -qs tools.sh "/proc/$holder/cmdline"; then
    tree=("$holder")
    for ((i = 0; i < ${#tree[@]}; i++)); do
      mapfile -t children < <(pgrep -P "${tree[$i]}" || true)
      tree+=("${children[@]}")
    done
    renice -n "$(nice)" -p "${tree[@]}" >/dev/null 2>&1 || true
  fi
  flock 9
fi
echo "$$" >target/tools.pid

MDBOOK_VERSION=0.5.4
CARGO_DEB_VERSION=3.8.0

for tool in "$@"; do
  case "$tool" in
    mdbook)
      if [ "$(mdbook --version 2>/dev/null)" != "mdbook v${MDBOOK_VERSION}" ]; then
        # Without its default features: no live-reload server or search index to build.
        cargo install --locked --no-default-features mdbook@"${MDBOOK_VERSION}"
      fi
      ;;
    cargo-deb)
      if [ "$(cargo-deb --version 2>/dev/null)" != "cargo-deb ${CARGO_DEB_VERSION}" ]; then
        cargo install --locked cargo-deb@"${CARGO_DEB_VERSION}"
      fi
      ;;
    *)
      echo "tools.sh: unknown tool '$tool' (mdbook, cargo-deb)" >&2
      exit 2
      ;;
  esac
done
