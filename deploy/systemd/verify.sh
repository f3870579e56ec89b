#!/usr/bin/env bash
# Checks the systemd units without systemd running (CI containers have no systemd as PID 1):
# `systemd-analyze verify --root` against a throwaway root holding the units, the distribution's
# own units (sysinit.target & co.) and the binaries at their ExecStart paths, then
# `systemd-analyze security --offline` with an exposure threshold of 3.0 (30 on its 0-100 scale). Any warning fails.
#   deploy/systemd/verify.sh [BIN_DIR]   (BIN_DIR: built mxserve binaries; default: stubs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bindir=${1:-}
command -v systemd-analyze >/dev/null || { echo "verify.sh: systemd-analyze missing (apt-get install systemd)"; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc/systemd/system" "$root/usr/local/bin" "$root/etc/mxserve" "$root/usr/lib/systemd"
for d in /usr/lib/systemd/system /lib/systemd/system; do
  [[ -d $d ]] && { cp -a "$d" "$root/usr/lib/systemd/"; break; }
done
cp "$here"/*.service "$here"/*.target "$root/etc/systemd/system/"
for b in mxserve-coordinator mxserve-worker; do
  if [[ -n $bindir && -x $bindir/$b ]]; then
    cp "$bindir/$b" "$root/usr/local/bin/$b"
  else
    printf '#!/bin/sh\nexit 0\n' > "$root/usr/local/bin/$b"
    chmod +x "$root/usr/local/bin/$b"
  fi
done
# The example environment files must define every variable the units expand.
cp "$here/mxserve.env.example" "$root/etc/mxserve/mxserve.env"
cp "$here/coordinator.env.example" "$root/etc/mxserve/coordinator.env"
cp "$here/worker.env.example" "$root/etc/mxserve/worker-0.env"
for unit in "$here"/*.service; do
  for var in $(grep -o '\${\?MXSERVE_[A-Z_]*' "$unit" | tr -d '${' | sort -u); do
    [[ $var == MXSERVE_GPU ]] && continue
    grep -qh "^$var=" "$here"/*.env.example || { echo "verify.sh: $(basename "$unit") uses \$$var, no *.env.example sets it"; exit 1; }
  done
done
# The coordinator's watchdog must outlast the longest step the router may hold (it logs a
# WARNING at start otherwise): down-wait + 2 x call timeout, with the defaults of the options.
opts=$here/../../coordinator/coordinator_options.h
down=$(grep -oP 'worker_down_wait = absl::Seconds\(\K[0-9]+' "$opts")
call=$(grep -oP 'expert_call_timeout = absl::Seconds\(\K[0-9]+' "$opts")
wd=$(grep -oP '^WatchdogSec=\K[0-9]+' "$here/mxserve-coordinator.service")
[[ -n $down && -n $call && -n $wd ]] || { echo "verify.sh: could not read WatchdogSec or the router's waits"; exit 1; }
((wd > down + 2 * call)) || {
  echo "verify.sh: coordinator WatchdogSec=$wd is not above worker_down_wait ${down}s + 2 x expert_call_timeout ${call}s"; exit 1; }
units=(mxserve-coordinator.service mxserve-worker@0.service mxserve-worker@7.service mxserve-workers.target)
out=$(systemd-analyze verify --root="$root" "${units[@]}" 2>&1) || { echo "$out"; echo "verify.sh: systemd-analyze verify failed"; exit 1; }
if [[ -n $out ]]; then echo "$out"; echo "verify.sh: systemd-analyze verify warned"; exit 1; fi
for u in mxserve-coordinator.service mxserve-worker@0.service; do
  line=$(systemd-analyze security --offline=yes --root="$root" --threshold=30 "$u" 2>&1 | tail -1) || {
    systemd-analyze security --offline=yes --root="$root" "$u" || true
    echo "verify.sh: $u exposure above 3.0"; exit 1; }
  echo "$line"
done
echo "verify.sh: units OK (${units[*]})"
