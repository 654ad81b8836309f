#!/usr/bin/env bash
# A private PostgreSQL 15 cluster on 127.0.0.1:55432 for the PostgreSQL store's tests.
#
#   postgres.sh install|start|stop|status
#
# The cluster trusts local connections (user postgres, no password) and runs as the `postgres`
# OS user. It accepts plain and TLS connections on the same port; its certificate is signed by
# the throwaway authority of certs.sh, whose certificate LEASEHOLD_TEST_POSTGRES_CA names.
# Its data lives in $SERVICES_DIR/postgres, or, when the `postgres` user cannot reach that
# folder (a checkout under /root, say), in /tmp/leasehold-pg-<hash>; the folder in use is
# recorded in $SERVICES_DIR/postgres.dir. $SERVICES_DIR/postgres.stop and postgres.start stop
# and start the server again, so a test can take it down and bring it back.
# LEASEHOLD_PG_MAX_CONNECTIONS (default 100, PostgreSQL's own) sets the server's connection
# limit: a fleet benchmark of hundreds of participants needs about five per store client.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
. "$here/certs.sh"

port=55432
max_connections=${LEASEHOLD_PG_MAX_CONNECTIONS:-100}
case "$max_connections" in
  ''|*[!0-9]*) echo "postgres: LEASEHOLD_PG_MAX_CONNECTIONS is '$max_connections'; it must be a number" >&2; exit 2 ;;
esac
bin=/usr/lib/postgresql/15/bin
url="postgres://postgres@127.0.0.1:$port/postgres"

install() {
  [ -x "$bin/postgres" ] || apt_install postgresql-15
}

# The folder for data and socket: one the postgres user can reach, with a short enough path for
# a Unix socket name.
base_dir() {
  local preferred="$SERVICES_DIR/postgres"
  if runuser -u postgres -- test -x "$SERVICES_DIR" && [ ${#preferred} -lt 80 ]; then
    echo "$preferred"
  else
    echo "/tmp/leasehold-pg-$(printf %s "$SERVICES_DIR" | sha256sum | cut -c1-12)"
  fi
}

as_postgres() {
  runuser -u postgres -- "$@"
}

write_control_scripts() {
  local base=$1
  cat >"$SERVICES_DIR/postgres.start" <<SCRIPT
#!/usr/bin/env bash
# Starts the test PostgreSQL server again and waits until it accepts connections.
set -euo pipefail
runuser -u postgres -- $bin/pg_ctl -D "$base/data" -l "$base/server.log" -w -t 30 \\
  -o "-p $port -k $base -c listen_addresses=127.0.0.1 -c fsync=off \\
      -c max_connections=$max_connections -c ssl=on -c ssl_cert_file=$base/server.pem -c ssl_key_file=$base/server.key" \\
  start >/dev/null
SCRIPT
  cat >"$SERVICES_DIR/postgres.stop" <<SCRIPT
#!/usr/bin/env bash
# Stops the test PostgreSQL server (fast shutdown) and waits until it has exited.
set -euo pipefail
runuser -u postgres -- $bin/pg_ctl -D "$base/data" -m fast -w -t 30 stop >/dev/null
SCRIPT
  chmod +x "$SERVICES_DIR/postgres.start" "$SERVICES_DIR/postgres.stop"
}

start() {
  stop
  wait_port_free 60 postgres "$port"
  [ -x "$bin/postgres" ] || { echo "postgres: not installed; run install first" >&2; return 1; }
  local base
  base=$(base_dir)
  mkdir -p "$base"
  chown postgres:postgres "$base"
  chmod 700 "$base"
  echo "$base" >"$SERVICES_DIR/postgres.dir"
  if [ ! -f "$base/data/PG_VERSION" ]; then
    as_postgres "$bin/initdb" -D "$base/data" -A trust -U postgres -E UTF8 --no-sync >/dev/null
  fi
  ensure_test_certs
  # The server reads its own copies: it runs as postgres and wants its key private to itself.
  command install -o postgres -g postgres -m 644 "$TEST_CERTS_DIR/server.pem" "$base/server.pem"
  command install -o postgres -g postgres -m 600 "$TEST_CERTS_DIR/server.key" "$base/server.key"
  write_control_scripts "$base"
  bash "$SERVICES_DIR/postgres.start"
  wait_until 30 "postgres" "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"
  cat >"$SERVICES_DIR/postgres.env" <<ENV
export LEASEHOLD_TEST_POSTGRES_URL=$url
export LEASEHOLD_TEST_POSTGRES_START=$SERVICES_DIR/postgres.start
export LEASEHOLD_TEST_POSTGRES_STOP=$SERVICES_DIR/postgres.stop
export LEASEHOLD_TEST_POSTGRES_CA=$TEST_CERTS_DIR/ca.pem
export LEASEHOLD_TEST_OTHER_CA=$TEST_CERTS_DIR/other-ca.pem
ENV
  echo "postgres: $url, TLS too (data in $base)"
}

stop() {
  rm -f "$SERVICES_DIR/postgres.env"
  [ -f "$SERVICES_DIR/postgres.dir" ] || return 0
  local base
  base=$(cat "$SERVICES_DIR/postgres.dir")
  if [ -f "$base/data/postmaster.pid" ]; then
    # A server that does not finish a fast shutdown in time is stopped at once: the next
    # start needs its port.
    as_postgres "$bin/pg_ctl" -D "$base/data" -m fast -w -t 30 stop >/dev/null ||
      as_postgres "$bin/pg_ctl" -D "$base/data" -m immediate -w -t 30 stop >/dev/null || true
  fi
}

status() {
  "$bin/pg_isready" -h 127.0.0.1 -p "$port"
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  ports) echo "$port" ;;
  *) echo "usage: $0 install|start|stop|status|ports" >&2; exit 2 ;;
esac
