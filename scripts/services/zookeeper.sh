#!/usr/bin/env bash
# ZooKeeper 3.8 (Debian package) as a standalone server on 127.0.0.1:52181.
#
#   zookeeper.sh install|start|stop|status
#
# `start` writes $SERVICES_DIR/zookeeper.env with LEASEHOLD_TEST_ZOOKEEPER (the connect
# string) and LEASEHOLD_TEST_ZOOKEEPER_CTL (a folder holding zookeeper.start and
# zookeeper.stop, which tests run to take the server down and bring it back).
set -euo pipefail
source "$(dirname "$0")/common.sh"

port=52181
home="$SERVICES_DIR/zookeeper"

# zookeeper.jar's manifest names the libraries it needs (/usr/share/java/...); slf4j-simple
# makes the server log to stderr, which start_daemon keeps in zookeeper.log.
classpath() {
  local jars=/usr/share/java/zookeeper.jar
  [ -f /usr/share/java/slf4j-simple.jar ] && jars+=:/usr/share/java/slf4j-simple.jar
  echo "$jars"
}

answers_ruok() {
  python3 - "$port" <<'PY'
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1) as s:
    s.sendall(b"ruok")
    sys.exit(0 if s.recv(16) == b"imok" else 1)
PY
}

write_config() {
  mkdir -p "$home/data"
  cat >"$home/zoo.cfg" <<CFG
tickTime=2000
dataDir=$home/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr
maxSessionTimeout=60000
# No fsync of the transaction log: a shared CI disk can stall one for seconds, past the
# tests' call timeouts, and what the tests check does not depend on the disk.
forceSync=no
CFG
}

# Scripts the tests run to stop and restart the server: they reuse this script so the
# process is tracked by the same pid file.
write_control_scripts() {
  local self
  self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  printf '#!/usr/bin/env bash\nSERVICES_DIR=%q exec bash %q start\n' "$SERVICES_DIR" "$self" \
    >"$SERVICES_DIR/zookeeper.start"
  printf '#!/usr/bin/env bash\nSERVICES_DIR=%q exec bash %q stop\n' "$SERVICES_DIR" "$self" \
    >"$SERVICES_DIR/zookeeper.stop"
  chmod +x "$SERVICES_DIR/zookeeper.start" "$SERVICES_DIR/zookeeper.stop"
}

case "${1:-}" in
  install)
    apt_install zookeeper
    ;;
  start)
    stop_daemon zookeeper
    wait_port_free 60 zookeeper "$port"
    write_config
    write_control_scripts
    start_daemon zookeeper java -Xmx256m -cp "$(classpath)" \
      -Dzookeeper.log.dir="$home" \
      org.apache.zookeeper.server.ZooKeeperServerMain "$home/zoo.cfg"
    wait_until 60 zookeeper answers_ruok
    cat >"$SERVICES_DIR/zookeeper.env" <<ENV
export LEASEHOLD_TEST_ZOOKEEPER=127.0.0.1:$port
export LEASEHOLD_TEST_ZOOKEEPER_CTL=$SERVICES_DIR
ENV
    echo "zookeeper: ready on 127.0.0.1:$port"
    ;;
  stop)
    stop_daemon zookeeper
    ;;
  ports) echo "$port" ;;
  status)
    if answers_ruok >/dev/null 2>&1; then echo "zookeeper: running on 127.0.0.1:$port"
    else echo "zookeeper: not running"; exit 1; fi
    ;;
  *)
    echo "usage: $0 install|start|stop|status|ports" >&2
    exit 2
    ;;
esac
