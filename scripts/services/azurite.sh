#!/usr/bin/env bash
# Azurite (npm azurite@3.35.0), the Azure Storage emulator: only its Table service, in
# memory, on 127.0.0.1:52002, and a second instance serving HTTPS on 127.0.0.1:52003 with the
# server certificate of certs.sh.
#
#   azurite.sh install|start|stop|status
#
# `start` writes $SERVICES_DIR/azurite.env with LEASEHOLD_TEST_AZURITE_ENDPOINT,
# LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT, LEASEHOLD_TEST_AZURITE_CA (the authority that signed
# the HTTPS certificate), LEASEHOLD_TEST_AZURITE_ACCOUNT and LEASEHOLD_TEST_AZURITE_KEY
# (Azurite's published development account, read from the installed package, not a secret).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.sh"
source "$here/certs.sh"

port=52002
tls_port=52003
version=3.35.0
# 3.36 and later require Node 22.
prefix="$SERVICES_DIR/azurite"
binary="$prefix/node_modules/.bin/azurite-table"
account=devstoreaccount1

installed_version() {
  node -p "require('$prefix/node_modules/azurite/package.json').version" 2>/dev/null || true
}

# The development account's key as the installed Azurite defines it.
account_key() {
  grep -rhoE 'EMULATOR_ACCOUNT_KEY(_STR)? = (Buffer\.from\()?"[^"]+"' \
    "$prefix/node_modules/azurite/dist/src/common/utils/constants.js" \
    | head -n1 | sed -E 's/.*"([^"]+)"$/\1/'
}

answers_http() {
  python3 - "$port" <<'PY'
import http.client, sys
connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=1)
connection.request("GET", "/")
connection.getresponse()
PY
}

answers_https() {
  python3 - "$tls_port" "$TEST_CERTS_DIR/ca.pem" <<'PY'
import http.client, ssl, sys
context = ssl.create_default_context(cafile=sys.argv[2])
connection = http.client.HTTPSConnection("127.0.0.1", int(sys.argv[1]), timeout=1, context=context)
connection.request("GET", "/")
connection.getresponse()
PY
}

case "${1:-}" in
  install)
    if [ "$(installed_version)" != "$version" ]; then
      mkdir -p "$prefix"
      npm install --prefix "$prefix" "azurite@$version" --no-audit --no-fund --loglevel=error
    fi
    ;;
  start)
    stop_daemon azurite
    stop_daemon azurite-tls
    wait_port_free 60 azurite "$port" "$tls_port"
    [ -x "$binary" ] || { echo "azurite: not installed; run install first" >&2; exit 1; }
    key=$(account_key)
    [ -n "$key" ] || { echo "azurite: development account key not found in the package" >&2; exit 1; }
    start_daemon azurite "$binary" --tableHost 127.0.0.1 --tablePort "$port" \
      --inMemoryPersistence --disableTelemetry --skipApiVersionCheck
    ensure_test_certs
    start_daemon azurite-tls "$binary" --tableHost 127.0.0.1 --tablePort "$tls_port" \
      --inMemoryPersistence --disableTelemetry --skipApiVersionCheck \
      --cert "$TEST_CERTS_DIR/server.pem" --key "$TEST_CERTS_DIR/server.key"
    wait_until 60 azurite answers_http
    wait_until 60 "azurite (HTTPS)" answers_https
    cat >"$SERVICES_DIR/azurite.env" <<ENV
export LEASEHOLD_TEST_AZURITE_ENDPOINT=http://127.0.0.1:$port/$account
export LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT=https://127.0.0.1:$tls_port/$account
export LEASEHOLD_TEST_AZURITE_CA=$TEST_CERTS_DIR/ca.pem
export LEASEHOLD_TEST_AZURITE_ACCOUNT=$account
export LEASEHOLD_TEST_AZURITE_KEY=$key
ENV
    echo "azurite: ready on 127.0.0.1:$port, HTTPS on 127.0.0.1:$tls_port"
    ;;
  stop)
    stop_daemon azurite
    stop_daemon azurite-tls
    ;;
  ports) echo "$port" "$tls_port" ;;
  status)
    ensure_test_certs
    if answers_http >/dev/null 2>&1 && answers_https >/dev/null 2>&1; then
      echo "azurite: running on 127.0.0.1:$port, HTTPS on 127.0.0.1:$tls_port"
    else echo "azurite: not running"; exit 1; fi
    ;;
  *)
    echo "usage: $0 install|start|stop|status|ports" >&2
    exit 2
    ;;
esac
