# Helpers sourced by the per-service scripts in this folder.
# SERVICES_DIR is set by scripts/services.sh.

# apt_install PACKAGE...: installs Debian packages that are not installed yet.
apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ ! -f "$SERVICES_DIR/.apt-updated" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    touch "$SERVICES_DIR/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# scratch_dir NAME: a folder for a test server's data, which need not outlive the machine:
# in memory (/dev/shm) where the machine has it, else under $SERVICES_DIR. A shared CI disk
# can stall an fsync for seconds (etcd has logged "wal: sync duration of 9.8s" beside the
# suite), long enough to fail calls the tests make with their short timeouts; in memory an
# fsync costs nothing, and what the tests check does not depend on the disk.
scratch_dir() {
  local shm=/dev/shm
  if [ -d "$shm" ] && [ -w "$shm" ]; then
    echo "$shm/leasehold-$(printf %s "$SERVICES_DIR" | sha256sum | cut -c1-12)/$1"
  else
    echo "$SERVICES_DIR/$1"
  fi
}

# start_daemon NAME CMD...: starts CMD in the background as its own process group, logging to
# $SERVICES_DIR/NAME.log and recording its PID in $SERVICES_DIR/NAME.pid.
start_daemon() {
  local name=$1; shift
  (set -m; nohup "$@" >"$SERVICES_DIR/$name.log" 2>&1 & echo $! >"$SERVICES_DIR/$name.pid")
}

# stop_daemon NAME: ends the process group recorded by start_daemon, if it is still running.
stop_daemon() {
  local name=$1 pid
  [ -f "$SERVICES_DIR/$name.pid" ] || return 0
  pid=$(cat "$SERVICES_DIR/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$SERVICES_DIR/$name.pid"
}

# wait_until SECONDS DESCRIPTION CMD...: retries CMD every 0.2 s until it succeeds.
wait_until() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "services: $what not ready after ${seconds}s" >&2
      return 1
    fi
    sleep 0.2
  done
}

# wait_port_free SECONDS NAME PORT...: waits until no socket holds the PORTs (a server
# stopped a moment ago, or a connection given one as its own port), as NAME would fail to
# bind them; after SECONDS it fails, naming the processes that hold them. A connection
# closed and waiting out TIME-WAIT does not count: the servers bind over it.
wait_port_free() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds)) filter="" port
  for port in "$@"; do filter+="${filter:+ or }sport = :$port"; done
  command -v ss >/dev/null || apt_install iproute2
  while [ -n "$(ss -Htan exclude time-wait "( $filter )")" ]; do
    if [ $SECONDS -ge $deadline ]; then
      echo "services: $what cannot start: port(s) $* still in use after ${seconds}s by:" >&2
      ss -Htanp exclude time-wait "( $filter )" >&2
      return 1
    fi
    sleep 0.5
  done
}
