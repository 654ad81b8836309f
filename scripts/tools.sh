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
flock 9

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
