#!/usr/bin/env bash
# Builds the Debian package (of the debug build, to spare a release build) and checks it as
# an operator would use it: installs it with dpkg, runs the installed binary against an
# SQLite store, reads its manual page, verifies the systemd unit, and removes the package
# again. As root on the test machine it installs for real; otherwise it can only unpack the
# package and check the same files there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The binary the test suite built, not a build of its own.
deb=$(bash scripts/package.sh --profile dev --no-build | tail -1)
echo "package-test.sh: $deb"
dpkg-deb --info "$deb" | grep -E "^ (Package|Version|Depends):"

scratch=$(mktemp -d)
installed=0
cleanup() {
  if [ "$installed" = 1 ]; then dpkg --purge leasehold >/dev/null 2>&1 || true; fi
  rm -rf "$scratch"
}
trap cleanup EXIT

if [ "$(id -u)" = 0 ]; then
  root=/
  dpkg -i "$deb"
  installed=1
else
  echo "package-test.sh: not root: unpacking the package instead of installing it"
  root=$scratch/root
  dpkg-deb -x "$deb" "$root"
fi
bin=$root/usr/bin/leasehold

fail() { echo "package-test.sh: $*" >&2; exit 1; }

"$bin" --version | tee "$scratch/version"
grep -q '^stores: sqlite' "$scratch/version" || fail "--version names no stores"
grep -Eq '^commit: ([0-9a-f]{12}|unknown)$' "$scratch/version" || fail "--version names no commit"

store="sqlite:$scratch/leases.db"
"$bin" --store "$store" init --partitions 4
"$bin" --store "$store" status | grep -q "released" || fail "status shows no released partition"

for page in leasehold leasehold-node leasehold-agent; do
  [ -s "$root/usr/share/man/man1/$page.1.gz" ] || fail "no manual page $page.1.gz"
done
MANPAGER=cat MANWIDTH=80 man -l "$root/usr/share/man/man1/leasehold-agent.1.gz" | grep -q "leasehold-agent" \
  || fail "man cannot read leasehold-agent.1"
if [ "$root" = / ]; then
  man -w leasehold >/dev/null || fail "man leasehold finds no page"
fi

for completion in usr/share/bash-completion/completions/leasehold \
  usr/share/zsh/vendor-completions/_leasehold usr/share/fish/vendor_completions.d/leasehold.fish; do
  [ -s "$root/$completion" ] || fail "no completion script $completion"
done
bash -n "$root/usr/share/bash-completion/completions/leasehold" || fail "the bash completion does not parse"

unit=$root/lib/systemd/system/leasehold-agent.service
grep -q '^ExecStart=/usr/bin/leasehold agent' "$unit" || fail "the unit does not run /usr/bin/leasehold"
if command -v systemd-analyze >/dev/null 2>&1; then
  # The unit names the binary's installed path: it verifies only where it is installed.
  if [ "$root" = / ]; then
    systemd-analyze verify "$unit"
  fi
else
  fail "systemd-analyze is missing (Debian package: systemd)"
fi

if [ "$root" = / ]; then
  [ -s /etc/leasehold/agent.token ] || fail "installing made no /etc/leasehold/agent.token"
  [ "$(stat -c %a /etc/leasehold/agent.token)" = 600 ] || fail "agent.token is not mode 0600"
  dpkg --purge leasehold
  installed=0
  [ ! -e /usr/bin/leasehold ] || fail "/usr/bin/leasehold is still there after a purge"
  [ ! -e /etc/leasehold/agent.token ] || fail "the token is still there after a purge"
fi
echo "package-test.sh: the package installs, runs and goes away cleanly"
