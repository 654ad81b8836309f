#!/usr/bin/env bash
# A private RabbitMQ node on 127.0.0.1:55672 for the partitioned-queue example's tests.
#
#   rabbitmq.sh install|start|stop|status
#
# The node (leasehold-test@localhost) serves AMQP 0-9-1 on 127.0.0.1:55672 as user guest
# (password guest, loopback only), with Erlang distribution on 127.0.0.1:55673 and its own
# epmd on 127.0.0.1:55674, so it never meets a system node. Everything it writes (Erlang
# cookie, Mnesia, logs) lives in $SERVICES_DIR/rabbitmq; no plugins are enabled. epmd and the
# node are two daemons (pid files $SERVICES_DIR/rabbitmq-epmd.pid, rabbitmq.pid), so `stop`
# ends exactly what `start` began. `start` on a node that already answers only rewrites the
# env file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"

port=55672
dist_port=55673
epmd_port=55674
node=leasehold-test@localhost
base="$SERVICES_DIR/rabbitmq"
url="amqp://guest:guest@127.0.0.1:$port/%2f"
bin=/usr/lib/rabbitmq/bin

install() {
  [ -x "$bin/rabbitmq-server" ] || apt_install rabbitmq-server
}

# The environment every RabbitMQ and Erlang program of this node runs with: the private home
# holds the cookie the CLI tools need to reach the node.
node_env() {
  export HOME="$base/home"
  export RABBITMQ_NODENAME=$node
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT=$port
  export RABBITMQ_DIST_PORT=$dist_port
  export ERL_EPMD_ADDRESS=127.0.0.1
  export ERL_EPMD_PORT=$epmd_port
  export RABBITMQ_MNESIA_BASE="$base/mnesia"
  export RABBITMQ_LOG_BASE="$base/log"
  # A node that fails to start writes a crash dump; without this, into the caller's directory.
  export ERL_CRASH_DUMP="$base/log/erl_crash.dump"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$base/enabled_plugins"
  export RABBITMQ_CONF_ENV_FILE="$base/rabbitmq-env.conf"
  export RABBITMQ_CONFIG_FILE="$base/rabbitmq.conf"
  export RABBITMQ_ADVANCED_CONFIG_FILE="$base/advanced.config"
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS='-kernel inet_dist_use_interface {127,0,0,1}'
}

# Whether the node's AMQP port accepts connections (bash's /dev/tcp: no nc on the image).
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

daemon_alive() {
  [ -f "$SERVICES_DIR/$1.pid" ] && kill -0 "$(cat "$SERVICES_DIR/$1.pid")" 2>/dev/null
}

write_env() {
  cat >"$SERVICES_DIR/rabbitmq.env" <<ENV
export LEASEHOLD_TEST_AMQP_URL=$url
ENV
}

start() {
  if daemon_alive rabbitmq && daemon_alive rabbitmq-epmd && port_open; then
    write_env
    echo "rabbitmq: already running on $url"
    return 0
  fi
  stop
  wait_port_free 60 rabbitmq "$port" "$dist_port" "$epmd_port"
  [ -x "$bin/rabbitmq-server" ] || { echo "rabbitmq: not installed; run install first" >&2; return 1; }
  mkdir -p "$base/home" "$base/mnesia" "$base/log"
  : >"$base/rabbitmq-env.conf"
  # An empty list: no management plugin, no web port.
  [ -f "$base/enabled_plugins" ] || echo '[].' >"$base/enabled_plugins"
  [ -f "$base/rabbitmq.conf" ] || cat >"$base/rabbitmq.conf" <<CONF
loopback_users.guest = true
disk_free_limit.absolute = 50MB
CONF
  node_env
  start_daemon rabbitmq-epmd /usr/bin/epmd -address 127.0.0.1 -port "$epmd_port"
  wait_until 10 "rabbitmq epmd" /usr/bin/epmd -port "$epmd_port" -names
  start_daemon rabbitmq "$bin/rabbitmq-server"
  # await_startup fails at once when the node has not begun yet; the port opens last.
  wait_until 90 "rabbitmq" port_open
  wait_until 30 "rabbitmq" "$bin/rabbitmqctl" -n "$node" -q await_startup
  write_env
  echo "rabbitmq: $url (data in $base)"
}

stop() {
  rm -f "$SERVICES_DIR/rabbitmq.env"
  if daemon_alive rabbitmq; then
    (node_env && "$bin/rabbitmqctl" -n "$node" -q stop >/dev/null 2>&1) || true
  fi
  stop_daemon rabbitmq
  stop_daemon rabbitmq-epmd
}

status() {
  port_open && (node_env && "$bin/rabbitmqctl" -n "$node" -q status >/dev/null)
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  ports) echo "$port" "$dist_port" "$epmd_port" ;;
  *) echo "usage: $0 install|start|stop|status|ports" >&2; exit 2 ;;
esac
