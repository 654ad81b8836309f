#!/usr/bin/env bash
# Builds the guide (docs/, an mdBook) into target/book, after checking its links, that every
# page is in SUMMARY.md, that every alert rule has a runbook, and that the README stays an
# entry page. Installs mdBook from crates.io when it is missing (a few minutes, once).
#
#   scripts/docs.sh            check and build
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/tools.sh mdbook

python3 scripts/check_docs.py
# mdBook reports a missing include or chapter as an error; warnings are shown as they come.
mdbook build docs
echo "docs.sh: the guide is in target/book/index.html"
