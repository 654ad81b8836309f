#!/usr/bin/env bash
# Checks the Prometheus files in deploy/prometheus with promtool: the rule file, the example
# configuration, and the unit tests of every alert (alerts.test.yml). Installs Debian's
# `prometheus` package, which ships promtool, when promtool is not on the PATH.
# Also checks that the queries of deploy/grafana/leasehold.json are valid PromQL (with jq or
# python3 to read it).
#
#   scripts/promtool-test.sh
#
# Exit 0 when every check passed, 1 when one failed, 2 when promtool could not be installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prometheus_dir="$root/deploy/prometheus"
dashboard="$root/deploy/grafana/leasehold.json"

# Installing the package must not start the Prometheus server it also contains: its
# post-installation script runs `invoke-rc.d prometheus start || exit 1`, which, on a machine
# with a runlevel, starts a server on port 9090 or, if that fails, fails the installation
# (in a container with no runlevel, invoke-rc.d skips the start). A policy-rc.d that answers
# 101 ("action forbidden") makes invoke-rc.d, and deb-systemd-invoke, skip the start and
# succeed. Whatever policy was in place before is put back afterwards.
install_promtool() {
  export SERVICES_DIR="$root/.services"
  mkdir -p "$SERVICES_DIR"
  # shellcheck source=services/common.sh
  source "$root/scripts/services/common.sh"

  local policy=/usr/sbin/policy-rc.d backup=""
  if [ -e "$policy" ]; then
    backup=$(mktemp)
    cp -p "$policy" "$backup"
  fi
  restore_policy() {
    if [ -n "$backup" ]; then
      cp -p "$backup" "$policy"
      rm -f "$backup"
    else
      rm -f "$policy"
    fi
  }
  trap restore_policy EXIT
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"

  echo "promtool-test: installing Debian package prometheus (for promtool)"
  if ! apt_install prometheus; then
    # The package lists may be older than the archive: update them and try once more.
    rm -f "$SERVICES_DIR/.apt-updated"
    apt_install prometheus || echo "promtool-test: apt-get install prometheus failed" >&2
  fi
  restore_policy
  trap - EXIT
}

if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "promtool-test: promtool is missing; install it (Debian: apt-get install prometheus) or run this as root" >&2
    exit 2
  fi
  install_promtool
  if ! command -v promtool >/dev/null 2>&1; then
    echo "promtool-test: promtool is still missing after installing prometheus" >&2
    exit 2
  fi
fi
promtool --version 2>&1 | head -1

failed=0
check() {
  echo "== $*"
  if ! "$@"; then
    echo "promtool-test: FAILED: $*" >&2
    failed=1
  fi
}

# promtool finds the rule files beside the file that lists them; running from their directory
# keeps the names in its output short.
cd "$prometheus_dir"
check promtool check rules alerts.yml
check promtool check config prometheus.yml
check promtool test rules alerts.test.yml

# The dashboard: valid JSON, and every query valid PromQL (checked by promtool as the
# expressions of recording rules, with Grafana's variables replaced by values).
if [ -f "$dashboard" ]; then
  queries_dir=$(mktemp -d)
  queries="$queries_dir/dashboard-queries.yml"
  printf 'groups:\n  - name: dashboard\n    rules:\n' >"$queries"
  to_rules=()
  if command -v jq >/dev/null 2>&1; then
    to_rules=(jq -r '[.. | objects | select(has("expr")) | .expr] | to_entries[]
      | "      - record: dashboard:query_\(.key)\n        expr: \(.value
          | gsub("\\$__rate_interval"; "5m") | gsub("\\$group"; "default") | tojson)"' "$dashboard")
  elif command -v python3 >/dev/null 2>&1; then
    to_rules=(python3 -c '
import json, sys
def exprs(node):
    if isinstance(node, dict):
        if "expr" in node:
            yield node["expr"]
        for value in node.values():
            yield from exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from exprs(value)
for i, expr in enumerate(exprs(json.load(open(sys.argv[1])))):
    expr = expr.replace("$__rate_interval", "5m").replace("$group", "default")
    print(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(expr)}")
' "$dashboard")
  fi
  echo "== dashboard queries: ${dashboard#"$root"/}"
  if [ ${#to_rules[@]} -eq 0 ]; then
    echo "skipped: neither jq nor python3 is installed to read it"
  elif "${to_rules[@]}" >>"$queries"; then
    check promtool check rules "$queries"
  else
    echo "promtool-test: FAILED: ${dashboard#"$root"/} is not valid JSON" >&2
    failed=1
  fi
  rm -rf "$queries_dir"
fi

if [ "$failed" -ne 0 ]; then
  echo "promtool-test: some checks failed" >&2
  exit 1
fi
echo "promtool-test: all checks passed"
