#!/usr/bin/env bash
# make fresh-check: prove the README's promise on a truly fresh machine.
#
# 1. debootstrap a minimal Debian 12 root; install only git and make in it (the prerequisite);
#    clone this repository's HEAD into it.
# 2. With network: `make demo` (timed: a newcomer's first run), then `make setup`, the set-up
#    half of `make test` (so the servers, Java, Node.js, the extras and the wheels are fetched).
# 3. With loopback only: `make demo`, then `make test`. The servers of step 2 are gone, so
#    the project must start its own again, and nothing can be downloaded.
# 4. Print the pytest summary.
#
# Every step runs in its own network namespace (so this machine's own MariaDB and Redis are out
# of reach; step 2's uplink is slirp4netns, user-mode) and its own mount + PID namespaces
# (unshare --kill-child): /proc, /dev and /sys
# are mounted only there, and when the step ends the kernel ends every process it left. The
# servers set-up started are stopped by pid first. The trap checks that nothing is left
# mounted or running under the root, then deletes it (FRESH_CHECK_KEEP=1 keeps it).
# Needs root and network to Debian's mirror and PyPI. About 15-20 minutes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: needs root (debootstrap, chroot, namespaces)" >&2; exit 2; }
MIRROR=${FRESH_CHECK_MIRROR:-http://deb.debian.org/debian}
WORK=$(mktemp -d "${FRESH_CHECK_TMP:-/var/tmp}/consolidator-fresh.XXXXXX")
ROOT=$WORK/root
T_START=$(date +%s)
STEP_PID=""
SLIRP_PID=""
say() { echo "fresh-check: $*"; }

left_behind() {  # mounts under the root, then processes whose root directory is the root
  findmnt -rn -o TARGET | awk -v r="$ROOT" 'index($0, r) == 1'
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && echo "process ${p#/proc/}"
  done
  return 0
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$STEP_PID" ] && kill -0 "$STEP_PID" 2>/dev/null; then
    # unshare ignores SIGTERM while it waits; killed, it takes its namespace along (--kill-child)
    kill -KILL "$STEP_PID" 2>/dev/null || true
    wait "$STEP_PID" 2>/dev/null || true
  fi
  [ -z "$SLIRP_PID" ] || kill "$SLIRP_PID" 2>/dev/null || true
  findmnt -rn -o TARGET | awk -v r="$ROOT" 'index($0, r) == 1' | sort -r \
    | while read -r m; do umount -l "$m" || true; done
  local left; left=$(left_behind)
  if [ -n "$left" ]; then
    say "LEFT BEHIND (not deleting $WORK):" >&2; echo "$left" >&2; rc=1
  elif [ "${FRESH_CHECK_KEEP:-0}" = 1 ]; then
    say "nothing mounted or running; root kept in $ROOT"
  else
    rm -rf "$WORK"
    say "nothing mounted or running; removed the fresh root"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# in_root NET SCRIPT: run SCRIPT (bash) in the fresh root, in new mount, PID, UTS and network
# namespaces. The root never sees this machine's servers: its 127.0.0.1 is its own loopback.
# NET=online adds a user-mode uplink (slirp4netns: no change to this machine's network set-up,
# and the machine's own loopback stays out of reach); NET=offline has loopback only.
in_root() {
  local net=$1 script=$2
  printf '%s\n' "set -euo pipefail" "cd /root" "$script" > "$ROOT/root/step.sh"
  unshare --mount --pid --uts --net --fork --kill-child -- bash -euc '
    root=$1
    hostname consolidator-fresh
    ip link set lo up
    if [ "$2" = online ]; then  # wait for slirp4netns to configure tap0
      for _ in $(seq 1 100); do ip -4 addr show tap0 2>/dev/null | grep -q inet && break; sleep 0.1; done
      ip -4 addr show tap0 2>/dev/null | grep -q inet || { echo "fresh-check: no uplink" >&2; exit 1; }
    fi
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t sysfs sysfs "$root/sys"
    exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb CI="${CI:-}" \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash /root/step.sh
  ' fresh "$ROOT" "$net" &
  STEP_PID=$!
  if [ "$net" = online ]; then
    local child=""
    for _ in $(seq 1 100); do
      child=$(awk '{print $1}' "/proc/$STEP_PID/task/$STEP_PID/children" 2>/dev/null || true)
      [ -n "$child" ] && break; sleep 0.1
    done
    slirp4netns --configure --mtu=65520 --disable-host-loopback "$child" tap0 >"$WORK/slirp4netns.log" 2>&1 &
    SLIRP_PID=$!
  fi
  local rc=0; wait "$STEP_PID" || rc=$?
  STEP_PID=""
  if [ -n "$SLIRP_PID" ]; then kill "$SLIRP_PID" 2>/dev/null || true; wait "$SLIRP_PID" 2>/dev/null || true; SLIRP_PID=""; fi
  return "$rc"
}

# Stop what the project's set-up started, by the pids it recorded.
STOP_SERVERS='
if [ -f /root/consolidator/.tools/run/started.pids ]; then
  while read -r name pid; do
    echo "fresh-check: stopping $name (pid $pid)"; kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  done < /root/consolidator/.tools/run/started.pids
  rm -f /root/consolidator/.tools/run/started.pids
fi'

if [ -n "$(git -C "$REPO" status --porcelain --untracked-files=no)" ]; then
  say "note: uncommitted changes are not checked (the fresh root gets a clone of HEAD)"
fi
missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v slirp4netns >/dev/null || missing+=(slirp4netns)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} on this machine"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

case "$ROOT" in /?*/root) ;; *) say "refusing to work on root '$ROOT'" >&2; exit 2 ;; esac
if [ -n "${FRESH_CHECK_REUSE:-}" ]; then
  # For debugging the check itself: reuse a root kept by FRESH_CHECK_KEEP=1. Not fresh: its
  # timings and downloads mean nothing. Deleted at the end unless FRESH_CHECK_KEEP=1.
  rmdir "$ROOT" 2>/dev/null || true
  mv "$FRESH_CHECK_REUSE" "$ROOT"
  rm -rf "$ROOT/root/consolidator"
  say "REUSING $FRESH_CHECK_REUSE: this run is NOT a fresh check"
else
  say "building a minimal Debian 12 root in $ROOT (debootstrap, about a minute on an idle machine)"
  debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 &
  bootstrap=$!
  while kill -0 "$bootstrap" 2>/dev/null; do
    sleep 15
    say "  ... debootstrap: $(tail -n 1 "$WORK/debootstrap.log")"
  done
  wait "$bootstrap" || { tail -n 20 "$WORK/debootstrap.log" >&2; exit 1; }
  {
    echo "deb $MIRROR bookworm main"
    echo "deb $MIRROR bookworm-updates main"
    echo "deb http://deb.debian.org/debian-security bookworm-security main"
  } > "$ROOT/etc/apt/sources.list"
  echo "nameserver 10.0.2.3" > "$ROOT/etc/resolv.conf"  # slirp4netns forwards DNS
  echo consolidator-fresh > "$ROOT/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tconsolidator-fresh\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    > "$ROOT/etc/hosts"
  # As in container images: packages' maintainer scripts start no services. The project's
  # set-up must start MariaDB and Redis itself.
  printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
  chmod +x "$ROOT/usr/sbin/policy-rc.d"
  # Where this machine's network inspects TLS with a CA of its own, the root trusts the local
  # CAs this machine trusts (nothing else of its set-up is copied): any machine on the same
  # network needs them.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$ROOT/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/"
  fi

  say "installing git and make in the fresh root (the README's prerequisite)"
  in_root online 'apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git make >/dev/null
update-ca-certificates >/dev/null'
fi
git clone --quiet --no-checkout "$REPO" "$ROOT/root/consolidator"
git -C "$ROOT/root/consolidator" checkout --quiet "$(git -C "$REPO" rev-parse HEAD)"
say "cloned $(git -C "$REPO" rev-parse --short HEAD) into /root/consolidator"

say "step 1/2, with network: make demo (timed), then make setup (the set-up of make test)"
in_root online "
cd consolidator
t0=\$(date +%s)
make demo
echo \"fresh-check: first make demo took \$(( \$(date +%s) - t0 )) s, set-up included\" | tee /root/demo-time
t0=\$(date +%s)
make setup
echo \"fresh-check: make setup (the rest of make test's set-up) took \$(( \$(date +%s) - t0 )) s\" | tee /root/setup-time
$STOP_SERVERS"

say "step 2/2, loopback only (no network): make demo, then make test"
rc=0
in_root offline "
cd consolidator
make demo
rc=0; make test 2>&1 | tee /root/make-test.log || rc=\$?
$STOP_SERVERS
exit \$rc" || rc=$?

say "----- summary -----"
cat "$ROOT/root/demo-time" "$ROOT/root/setup-time" 2>/dev/null || true
summary=$(grep -E '^=+ .*(passed|failed|error|no tests ran).* in [0-9.]+s' "$ROOT/root/make-test.log" | tail -n 1 || true)
say "offline make test: exit $rc; pytest: ${summary:-no summary line}"
say "total $(( $(date +%s) - T_START )) s"
[ "$rc" -eq 0 ] && [ -n "$summary" ]
