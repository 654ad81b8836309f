#!/usr/bin/env bash
# A 3-member etcd cluster on loopback for the etcd store's tests.
#
#   etcd.sh install|start|stop|status
#
# Members e1, e2, e3 listen for clients on 127.0.0.1:52379, 52389, 52399 and for peers on
# 52380, 52390, 52400, with data in `scratch_dir etcd`/<name> (common.sh: in memory where
# the machine allows). Each member is its own daemon (pid file
# $SERVICES_DIR/etcd-<name>.pid); $SERVICES_DIR/etcd-<name>.stop stops it and
# $SERVICES_DIR/etcd-<name>.start starts it again with the same flags, so a test can take one
# member down and bring it back.
#
# A separate single-member cluster, tls, serves clients over TLS on 127.0.0.1:52409 (peer
# 52410, plain) with the server certificate of certs.sh; LEASEHOLD_TEST_ETCD_CA names the
# authority that signed it. Another, mtls, on 127.0.0.1:52419 (peer 52420), also demands a
# client certificate signed by that authority (LEASEHOLD_TEST_ETCD_MTLS_ENDPOINT,
# LEASEHOLD_TEST_CLIENT_CERT, LEASEHOLD_TEST_CLIENT_KEY).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
. "$here/certs.sh"

members=(e1 e2 e3)
declare -A client_port=([e1]=52379 [e2]=52389 [e3]=52399)
declare -A peer_port=([e1]=52380 [e2]=52390 [e3]=52400)
endpoints="127.0.0.1:52379,127.0.0.1:52389,127.0.0.1:52399"
initial_cluster="e1=http://127.0.0.1:52380,e2=http://127.0.0.1:52390,e3=http://127.0.0.1:52400"
tls_endpoint="127.0.0.1:52409"
tls_peer="http://127.0.0.1:52410"
mtls_endpoint="127.0.0.1:52419"
mtls_peer="http://127.0.0.1:52420"
# Every port above, for the wait before a start and for `ports`.
all_ports=("${client_port[@]}" "${peer_port[@]}" 52409 52410 52419 52420)
data=$(scratch_dir etcd)

install() {
  # protoc and the well-known .proto files are needed to build the etcd client crate.
  apt_install etcd-server etcd-client protobuf-compiler libprotobuf-dev
}

# write_member_scripts NAME: scripts that start member NAME again with the same flags, and stop
# it (waiting until it has exited, so a restart finds its ports free).
write_member_scripts() {
  local name=$1 script="$SERVICES_DIR/etcd-$1.start"
  cat >"$script" <<SCRIPT
#!/usr/bin/env bash
# Starts etcd member $name of the test cluster again, with the flags it was first started with.
set -euo pipefail
export SERVICES_DIR="$SERVICES_DIR"
. "$here/common.sh"
start_daemon etcd-$name etcd --name $name \\
  --data-dir "$data/$name" \\
  --listen-client-urls http://127.0.0.1:${client_port[$name]} \\
  --advertise-client-urls http://127.0.0.1:${client_port[$name]} \\
  --listen-peer-urls http://127.0.0.1:${peer_port[$name]} \\
  --initial-advertise-peer-urls http://127.0.0.1:${peer_port[$name]} \\
  --initial-cluster $initial_cluster \\
  --initial-cluster-token leasehold-test \\
  --initial-cluster-state new
SCRIPT
  cat >"$SERVICES_DIR/etcd-$name.stop" <<SCRIPT
#!/usr/bin/env bash
# Stops etcd member $name of the test cluster and waits until it has exited.
set -euo pipefail
export SERVICES_DIR="$SERVICES_DIR"
. "$here/common.sh"
stop_daemon etcd-$name
SCRIPT
  chmod +x "$script" "$SERVICES_DIR/etcd-$name.stop"
}

# start_tls_member NAME CLIENT_ENDPOINT PEER_URL [FLAG...]: a single-member cluster serving
# clients over TLS with the test server certificate.
start_tls_member() {
  local name=$1 endpoint=$2 peer=$3; shift 3
  start_daemon "etcd-$name" etcd --name "$name" \
    --data-dir "$data/$name" \
    --listen-client-urls "https://$endpoint" \
    --advertise-client-urls "https://$endpoint" \
    --cert-file "$TEST_CERTS_DIR/server.pem" \
    --key-file "$TEST_CERTS_DIR/server.key" \
    --listen-peer-urls "$peer" \
    --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$name=$peer" \
    --initial-cluster-token "leasehold-test-$name" \
    --initial-cluster-state new \
    "$@"
}

mtls_healthy() {
  ETCDCTL_API=3 etcdctl --endpoints="https://$mtls_endpoint" --cacert="$TEST_CERTS_DIR/ca.pem" \
    --cert="$TEST_CERTS_DIR/client.pem" --key="$TEST_CERTS_DIR/client.key" \
    --dial-timeout=1s --command-timeout=2s endpoint health
}

tls_healthy() {
  ETCDCTL_API=3 etcdctl --endpoints="https://$tls_endpoint" --cacert="$TEST_CERTS_DIR/ca.pem" \
    --dial-timeout=1s --command-timeout=2s endpoint health
}

healthy() {
  ETCDCTL_API=3 etcdctl --endpoints="$endpoints" --dial-timeout=1s --command-timeout=2s \
    endpoint health
}

start() {
  stop
  wait_port_free 60 etcd "${all_ports[@]}"
  command -v etcd >/dev/null || { echo "etcd: not installed; run install first" >&2; return 1; }
  # A fresh cluster each start: leftover member data from another cluster would not join.
  rm -rf "$data" "$SERVICES_DIR/etcd"
  mkdir -p "$data"
  for name in "${members[@]}"; do
    write_member_scripts "$name"
    bash "$SERVICES_DIR/etcd-$name.start"
  done
  ensure_test_certs
  start_tls_member tls "$tls_endpoint" "$tls_peer"
  start_tls_member mtls "$mtls_endpoint" "$mtls_peer" \
    --client-cert-auth --trusted-ca-file "$TEST_CERTS_DIR/ca.pem"
  wait_until 30 "etcd cluster" healthy
  wait_until 30 "etcd TLS member" tls_healthy
  wait_until 30 "etcd client-certificate member" mtls_healthy
  cat >"$SERVICES_DIR/etcd.env" <<ENV
export LEASEHOLD_TEST_ETCD_ENDPOINTS=$endpoints
export LEASEHOLD_TEST_ETCD_PIDS_DIR=$SERVICES_DIR
export LEASEHOLD_TEST_ETCD_TLS_ENDPOINT=$tls_endpoint
export LEASEHOLD_TEST_ETCD_CA=$TEST_CERTS_DIR/ca.pem
export LEASEHOLD_TEST_OTHER_CA=$TEST_CERTS_DIR/other-ca.pem
export LEASEHOLD_TEST_ETCD_MTLS_ENDPOINT=$mtls_endpoint
export LEASEHOLD_TEST_CLIENT_CERT=$TEST_CERTS_DIR/client.pem
export LEASEHOLD_TEST_CLIENT_KEY=$TEST_CERTS_DIR/client.key
ENV
  echo "etcd: 3 members on $endpoints, TLS member on $tls_endpoint, client-certificate member on $mtls_endpoint"
}

stop() {
  for name in "${members[@]}" tls mtls; do
    stop_daemon "etcd-$name"
  done
  rm -rf "$data"
  rmdir "$(dirname "$data")" 2>/dev/null || true
  rm -f "$SERVICES_DIR/etcd.env"
}

status() {
  healthy
  ensure_test_certs
  tls_healthy
  mtls_healthy
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  ports) echo "${all_ports[@]}" ;;
  *) echo "usage: $0 install|start|stop|status|ports" >&2; exit 2 ;;
esac
