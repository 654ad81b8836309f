#!/usr/bin/env bash
# Installs, starts and stops the store servers the test suite talks to, all on loopback.
#
#   scripts/services.sh install|start|stop|status|revive [SERVICE...]
#
# `revive` starts again each service whose `status` fails (a test that stopped a server and
# failed before starting it again), and leaves the others running.
# SERVICE is the name of a script in scripts/services/ (postgres, etcd, zookeeper, azurite);
# with none, every one. `start` leaves, per service, .services/<service>.env with the
# `export` lines tests read (for example LEASEHOLD_TEST_POSTGRES_URL) and a pid file, so that
# `stop` ends exactly the processes it started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
export SERVICES_DIR="$root/.services"
mkdir -p "$SERVICES_DIR"

action=${1:-}
case "$action" in
  install|start|stop|status|revive) shift ;;
  *) echo "usage: $0 install|start|stop|status|revive [SERVICE...]" >&2; exit 2 ;;
esac

services=("$@")
if [ ${#services[@]} -eq 0 ]; then
  for script in "$root"/scripts/services/*.sh; do
    [ -e "$script" ] || continue
    name=$(basename "$script" .sh)
    [ "$name" = common ] || services+=("$name")
  done
fi

status=0

# Programs the tests run besides the servers: systemd-analyze verifies the unit in
# deploy/systemd (Debian's systemd package, which in a container only installs the
# programs), and curl runs the Kubernetes hooks in deploy/kubernetes. Installed with the
# full set, not when single services are named.
if [ "$action" = install ] && [ $# -eq 0 ]; then
  tools=()
  command -v systemd-analyze >/dev/null 2>&1 || tools+=(systemd)
  command -v curl >/dev/null 2>&1 || tools+=(curl)
  if [ ${#tools[@]} -gt 0 ]; then
    # shellcheck source=services/common.sh
    (. "$root/scripts/services/common.sh" && apt_install "${tools[@]}") \
      || { echo "services: installing ${tools[*]} failed" >&2; status=1; }
  fi
fi

for service in "${services[@]}"; do
  if [ ! -f "$root/scripts/services/$service.sh" ]; then
    echo "services: no such service: $service" >&2
    exit 2
  fi
done

# The servers listen on fixed ports inside the kernel's range for the local ports of
# outgoing connections (32768-60999 by default): a connection made a moment before (between
# etcd's members, say) can be given one of them, and the server started next then fails to
# bind it ("Address already in use"). As root, the ports of every service are reserved from
# that range while the servers run. The file below records the ports this checkout added,
# so that `stop` takes out exactly those and keeps whatever else is reserved, even when
# another checkout's servers start or stop in between.
reserved=/proc/sys/net/ipv4/ip_local_reserved_ports
added="$SERVICES_DIR/reserved-ports.added"
# `ports_edit add|remove|missing PORT...` on the reserved list read from stdin: the list
# with the PORTs added or removed, or the PORTs it does not hold yet.
ports_edit() {
  python3 -c '
import sys
mode, ports = sys.argv[1], {int(p) for p in sys.argv[2:]}
current = set()
for part in filter(None, sys.stdin.read().strip().split(",")):
    low, _, high = part.partition("-")
    current.update(range(int(low), int(high or low) + 1))
result = {"add": current | ports, "remove": current - ports, "missing": ports - current}[mode]
print(("," if mode != "missing" else " ").join(map(str, sorted(result))))
' "$@"
}
reserve_ports() {
  [ -w "$reserved" ] || return 0
  local ports=() listed=() script list new
  for script in "$root"/scripts/services/*.sh; do
    case "$(basename "$script" .sh)" in common | certs) continue ;; esac
    read -ra listed < <(bash "$script" ports)
    ports+=("${listed[@]}")
  done
  if new=$(ports_edit missing "${ports[@]}" <"$reserved") &&
    list=$(ports_edit add "${ports[@]}" <"$reserved") &&
    echo "$list" >"$reserved" 2>/dev/null; then
    if [ -n "$new" ]; then echo "$new" >>"$added"; fi
  else
    echo "services: could not reserve the servers' ports (${ports[*]}) in $reserved" >&2
  fi
}
release_ports() {
  [ -f "$added" ] || return 0
  local ours=() list
  read -ra ours <<<"$(tr '\n' ' ' <"$added")"
  if [ ${#ours[@]} -gt 0 ] && list=$(ports_edit remove "${ours[@]}" <"$reserved"); then
    echo "$list" >"$reserved" 2>/dev/null || true
  fi
  rm -f "$added"
}
[ "$action" != start ] || reserve_ports

for service in "${services[@]}"; do
  if [ "$action" = revive ]; then
    bash "$root/scripts/services/$service.sh" status >/dev/null 2>&1 && continue
    echo "services: $service is not answering; starting it again"
    bash "$root/scripts/services/$service.sh" start || { echo "services: $service start failed" >&2; status=1; }
    continue
  fi
  bash "$root/scripts/services/$service.sh" "$action" || { echo "services: $service $action failed" >&2; status=1; }
done
if [ "$action" = stop ] && [ $# -eq 0 ]; then release_ports; fi
exit $status
