#!/usr/bin/env bash
# make container-check: build the worker image from the Containerfile and run it for real.
#
# 1. A base image without a registry: debootstrap a minimal Debian 12 root with python3 (3.11),
#    python3-venv and ca-certificates (cached as a tarball under build/container/), imported
#    with podman. The Containerfile takes it as BASE_IMAGE; users keep the official slim image.
# 2. podman build (docker format, so the HEALTHCHECK is kept), then the image's metadata: the
#    entry point, a non-root user, the health check, no CONSOLIDATOR_* value but the health port,
#    and no dev, Spark or CDK package inside.
# 3. Against this machine's MariaDB (127.0.0.1:3306, a database of this run, dropped at the end),
#    Redis (127.0.0.1:6379, db 11, a lock key of this run) and a local Kafka (`consolidator kafka
#    serve`, run from the image itself), all with host networking: records are produced (one of
#    them poison), the worker container (read-only root, no capabilities) must write every record
#    into batches on a mounted volume and the poison to the dead letter, answer /readyz,
#    /healthz, /metrics and its health check, and on SIGTERM exit 0 within its shutdown bound
#    (CONSOLIDATOR_WORKER_SHUTDOWN_SECONDS's default) with every offset committed.
# 4. One summary line.
#
# podman runs with a configuration of this run (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF): the
# runc runtime, cgroupfs, no default ulimits, and its own storage under build/container/ (kept
# between runs as a cache; `rm -rf build/container` frees it). The machine's own podman
# configuration and storage are untouched. The trap removes the containers it started (by id),
# drops its database and checks that none of its containers is left.
# Needs root and network to Debian's mirror and PyPI. 4-5 minutes the first time, then 1-2.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "container-check: needs root (debootstrap, podman)" >&2; exit 2; }
MIRROR=${CONTAINER_CHECK_MIRROR:-http://deb.debian.org/debian}
CACHE=${CONTAINER_CHECK_CACHE:-$REPO/build/container}
RECORDS=300 GROUP_COUNT=12
REDIS_URL=redis://127.0.0.1:6379/11  # no other check's or test's flush lock
DATABASE=consolidator_container_$(date +%s)_$$
DATABASE_URL=mysql://root@127.0.0.1:3306/$DATABASE
IMAGE=localhost/consolidator:check
RUN_LABEL=consolidator.container-check=$$
T_START=$(date +%s)
mkdir -p "$CACHE"
WORK=$(mktemp -d "${CONTAINER_CHECK_TMP:-/var/tmp}/consolidator-container.XXXXXX")
DATABASE_MADE=0
LONG_PID=""        # the step run_long is waiting for
say() { echo "container-check: $*"; }
fail() { say "FAILED: $*" >&2; exit 1; }

# --- podman with this run's configuration ---------------------------------------------------
export CONTAINERS_CONF=$WORK/containers.conf CONTAINERS_STORAGE_CONF=$WORK/storage.conf
cat > "$CONTAINERS_CONF" <<EOF
# Written by scripts/container-check.sh for this run only. crun fails on this machine's hybrid
# cgroups: runc with the cgroupfs manager, and no default ulimits (podman's defaults exceed the
# hard limits here).
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$CACHE/podman-tmp"
EOF
cat > "$CONTAINERS_STORAGE_CONF" <<EOF
[storage]
driver = "overlay"
graphroot = "$CACHE/storage"
runroot = "$CACHE/storage-run"
EOF
pm() { podman --runtime runc "$@"; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$LONG_PID" ] && kill -0 "$LONG_PID" 2>/dev/null; then
    kill "$LONG_PID" 2>/dev/null || true; wait "$LONG_PID" 2>/dev/null || true
  fi
  local id
  for id in $(pm ps --all --quiet --filter "label=$RUN_LABEL" 2>/dev/null); do  # this run's own
    pm rm --force --time 5 "$id" >/dev/null 2>&1 || say "could not remove container $id" >&2
  done
  if [ "$DATABASE_MADE" = 1 ]; then
    mysql -h 127.0.0.1 -P 3306 -u root -e "DROP DATABASE IF EXISTS \`$DATABASE\`" \
      || say "could not drop database $DATABASE" >&2
  fi
  # an interrupted debootstrap leaves /proc and /sys mounted in its root
  findmnt -rn -o TARGET | awk -v r="$WORK/" 'index($0, r) == 1' | sort -r \
    | while read -r m; do umount -l "$m" || true; done
  local left
  left=$(pm ps --all --quiet --filter "label=$RUN_LABEL" 2>/dev/null || true)
  left+=$(findmnt -rn -o TARGET | awk -v r="$WORK/" 'index($0, r) == 1')
  if [ -n "$left" ]; then
    say "LEFT BEHIND (not deleting $WORK): $left" >&2; rc=1
  else
    rm -rf "$WORK"
    say "removed this run's containers$([ "$DATABASE_MADE" = 1 ] && echo ", database $DATABASE") and files"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_long LABEL LOG CMD...: CMD with its output in LOG, a line every 15 s while it runs (LABEL
# and the log's last line), the log's tail when it fails.
run_long() {
  local label=$1 log=$2; shift 2
  local t0 now next; t0=$(date +%s); next=$((t0 + 15))
  "$@" >"$log" 2>&1 &
  LONG_PID=$!
  while kill -0 "$LONG_PID" 2>/dev/null; do
    sleep 1; now=$(date +%s)
    if [ "$now" -ge "$next" ]; then say "  ... $label ($((now - t0)) s): $(tail -n 1 "$log" | cut -c1-100)"; next=$((now + 15)); fi
  done
  if ! wait "$LONG_PID"; then LONG_PID=""; tail -n 30 "$log" >&2; fail "$label"; fi
  LONG_PID=""
  say "  done in $(( $(date +%s) - t0 )) s"
}

# --- tools ----------------------------------------------------------------------------------
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
command -v mysql >/dev/null || missing+=(mariadb-client)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} (apt)"
  run_long apt "$WORK/apt.log" bash -c \
    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${missing[*]}"
fi
mysql -h 127.0.0.1 -P 3306 -u root -e "SELECT 1" >/dev/null 2>&1 || fail "no MariaDB on 127.0.0.1:3306 (run make setup)"
[ "$(redis-cli -u "$REDIS_URL" PING 2>/dev/null || true)" = PONG ] || fail "no Redis on 127.0.0.1:6379 (run make setup)"

# --- 1. the base image ----------------------------------------------------------------------
BASE_PACKAGES=python3,python3-venv,ca-certificates
BASE_TAR=$CACHE/base-bookworm-$(echo "$BASE_PACKAGES" | sha256sum | cut -c1-12).tar
if [ ! -f "$BASE_TAR" ]; then
  rootfs=$WORK/rootfs
  say "building a minimal Debian 12 root with $BASE_PACKAGES (debootstrap; kept as $BASE_TAR)"
  run_long debootstrap "$WORK/debootstrap.log" debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$rootfs" "$MIRROR"
  # Where this machine's network inspects TLS with a CA of its own, the base trusts the local
  # CAs this machine trusts, so the build can reach PyPI (a user's base needs the same).
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >>"$WORK/debootstrap.log" 2>&1
  fi
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  tar --numeric-owner -C "$rootfs" -cf "$BASE_TAR.part" .
  mv "$BASE_TAR.part" "$BASE_TAR"
  rm -rf "$rootfs"
fi
BASE_IMAGE=localhost/consolidator-check-base:$(basename "$BASE_TAR" .tar | sed 's/^base-//')
if ! pm image exists "$BASE_IMAGE"; then
  say "importing $(basename "$BASE_TAR") as $BASE_IMAGE"
  run_long import "$WORK/import.log" pm import --change 'CMD ["/bin/bash"]' "$BASE_TAR" "$BASE_IMAGE"
fi
# once ARGS...: a one-off container of this run (host network, removed when it ends)
once() { pm run --rm --network host --no-healthcheck --label "$RUN_LABEL" "$@"; }
base_python=$(once "$BASE_IMAGE" python3 --version)
say "base image $BASE_IMAGE: $base_python"

# --- 2. the image ---------------------------------------------------------------------------
if [ -n "$(git -C "$REPO" status --porcelain -- Containerfile .dockerignore pyproject.toml uv.lock src)" ]; then
  say "note: the build context is the working tree, uncommitted changes included"
fi
t0=$(date +%s)
# CONTAINER_CHECK_NO_CACHE=1: build every layer again (else unchanged layers come from the cache)
NO_CACHE=(); [ "${CONTAINER_CHECK_NO_CACHE:-0}" = 1 ] && NO_CACHE=(--no-cache)
say "building $IMAGE from the Containerfile (podman build --format docker, so the HEALTHCHECK is kept)"
run_long build "$WORK/build.log" pm build "${NO_CACHE[@]}" --format docker --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --label "$RUN_LABEL" -t "$IMAGE" -f "$REPO/Containerfile" "$REPO"
BUILD_SECONDS=$(( $(date +%s) - t0 ))
BUILD_CACHED="$(grep -c -- '^--> Using cache' "$WORK/build.log" || true) of $(grep -cE '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]' "$WORK/build.log" || true) steps from the cache"
IMAGE_MB=$(( $(pm image inspect --format '{{.Size}}' "$IMAGE") / 1000000 ))

inspect() { pm image inspect --format "$1" "$IMAGE"; }
[ "$(inspect '{{json .Config.Entrypoint}}')" = '["consolidator","worker"]' ] \
  || fail "entry point is $(inspect '{{json .Config.Entrypoint}}'), not [\"consolidator\",\"worker\"]"
user=$(inspect '{{.Config.User}}')
case "${user%%:*}" in ''|0|root) fail "the image runs as '${user}', not a non-root user" ;; esac
inspect '{{json .Config.Healthcheck}}' | grep -q '/healthz' || fail "the image has no HEALTHCHECK on /healthz"
baked=$(inspect '{{range .Config.Env}}{{println .}}{{end}}' | grep '^CONSOLIDATOR_' | grep -v '^CONSOLIDATOR_WORKER_HTTP_PORT=' || true)
[ -z "$baked" ] || fail "settings baked into the image: $baked"
IMAGE_PORT=$(inspect '{{range .Config.Env}}{{println .}}{{end}}' | sed -n 's/^CONSOLIDATOR_WORKER_HTTP_PORT=//p')
extra=$(once --entrypoint python3 "$IMAGE" -c '
import importlib.util
print(" ".join(m for m in ("pyspark", "aws_cdk", "pytest", "hypothesis", "moto", "ruff", "cfnlint")
               if importlib.util.find_spec(m)))')
[ -z "$extra" ] || fail "packages that are not runtime dependencies are in the image: $extra"
version=$(once --entrypoint consolidator "$IMAGE" --version)
# the worker's shutdown bound: CONSOLIDATOR_WORKER_SHUTDOWN_SECONDS's default, as the image declares it
STOP_BOUND_SECONDS=$(once --entrypoint python3 "$IMAGE" -c '
from consolidator.settings import setting_field
print("%g" % setting_field("worker_shutdown_seconds")[1].default)')
say "image $IMAGE: ${IMAGE_MB} MB, built in ${BUILD_SECONDS} s ($BUILD_CACHED); $version; user $user; health port $IMAGE_PORT"

# --- 3. run it against MariaDB, Redis and a local Kafka ----------------------------------------
# a detached container of this run (host network): the local Kafka, later the worker
KAFKA=$(pm run --detach --network host --no-healthcheck --label "$RUN_LABEL" --name "cc-kafka-$$" \
  --entrypoint consolidator "$IMAGE" kafka serve --brokers 1)
BOOTSTRAP=""
for _ in $(seq 1 60); do
  BOOTSTRAP=$(pm logs "$KAFKA" 2>/dev/null | grep -E '^[^ ]+:[0-9]+$' | head -n 1 || true)
  [ -n "$BOOTSTRAP" ] && break; sleep 0.5
done
[ -n "$BOOTSTRAP" ] || { pm logs "$KAFKA" >&2; fail "the local Kafka did not start"; }
say "local Kafka (mock cluster, in a container of the image) at $BOOTSTRAP"

mkdir -p "$WORK/in" "$WORK/out"
chown 10001:10001 "$WORK/out"   # the image's user writes the batches there
TOPIC=orders KAFKA_GROUP=container-check
# RECORDS events in GROUP_COUNT groups, each order once, and one poison line (not JSON).
awk -v n="$RECORDS" -v g="$GROUP_COUNT" 'BEGIN {
  for (i = 1; i <= n; i++)
    printf "{\"location_id\": \"WH-%02d\", \"order_id\": \"o-%04d\", \"items\": [{\"sku\": \"s-%d\", \"quantity\": %d}]}\n",
      (i % g) + 1, i, i % 5, (i % 3) + 1
  print "this line is not JSON"
}' > "$WORK/in/events.jsonl"
echo '{"location_id": "WARM-UP", "order_id": "warm-up", "items": [{"sku": "s", "quantity": 1}]}' > "$WORK/in/warm-up.jsonl"

# host networking: the worker serves on a port free on this machine, not the image's default
HEALTH_PORT=$(once --entrypoint python3 "$IMAGE" -c '
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])')
ENV_ARGS=(
  -e "CONSOLIDATOR_DATABASE_URL=$DATABASE_URL" -e "CONSOLIDATOR_REDIS_URL=$REDIS_URL"
  -e "CONSOLIDATOR_KAFKA_BOOTSTRAP=$BOOTSTRAP" -e "CONSOLIDATOR_SOURCE_TOPICS=$TOPIC"
  -e "CONSOLIDATOR_KAFKA_GROUP_ID=$KAFKA_GROUP" -e "CONSOLIDATOR_LOCK_KEY=consolidator:container-check:$$"
  -e "CONSOLIDATOR_SINK_URL=file:///out/batches.jsonl" -e "CONSOLIDATOR_DEAD_LETTER_URL=file:///out/dead-letter.jsonl"
  -e CONSOLIDATOR_DEBOUNCE_SECONDS=2 -e CONSOLIDATOR_HARD_WINDOW_SECONDS=20 -e CONSOLIDATOR_TICK_INTERVAL_SECONDS=1
)
# the image's CLI, with this run's settings and volumes (read-only root, as in Kubernetes)
cli() { once --read-only --tmpfs /tmp "${ENV_ARGS[@]}" \
          -v "$WORK/in:/in:ro" -v "$WORK/out:/out" --entrypoint consolidator "$IMAGE" "$@"; }

DATABASE_MADE=1  # from here on the trap drops it (the name is this run's own)
schema=$(cli db migrate --create --json)
say "schema: $schema"
produce() { cli kafka produce "/in/$1" --bootstrap-servers "$BOOTSTRAP" --topic "$TOPIC" --json; }
# The topic exists (auto-created on first use) before the worker subscribes: /readyz waits for
# assigned partitions.
produce warm-up.jsonl >/dev/null

# count_batches: "<batches> <distinct orders in them, warm-up excluded> <orders counting repeats>"
count_batches() {
  once -v "$WORK/out:/out:ro" --entrypoint python3 "$IMAGE" -c '
import json, pathlib
path = pathlib.Path("/out/batches.jsonl")
batches = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
members = [i for b in batches if b["group_key"] != "WARM-UP" for i in b["item_ids"]]
print(len(batches), len(set(members)), len(members))'
}

# The health check runs below (`podman healthcheck run`), not on podman's timer: podman asks
# systemd for the timer, and says so on stderr (kept in podman.log) where systemd does not run.
WORKER=$(pm run --detach --network host --label "$RUN_LABEL" --name "cc-worker-$$" --read-only --tmpfs /tmp \
  --cap-drop all --security-opt no-new-privileges --health-interval disable \
  -e "CONSOLIDATOR_WORKER_HTTP_PORT=$HEALTH_PORT" "${ENV_ARGS[@]}" -v "$WORK/out:/out" "$IMAGE" 2>>"$WORK/podman.log")
say "worker container ${WORKER:0:12} started; waiting for /readyz"
ready=""
for _ in $(seq 1 120); do
  [ "$(pm inspect --format '{{.State.Running}}' "$WORKER")" = true ] || { pm logs "$WORKER" 2>&1 | tail -n 30 >&2; fail "the worker exited early"; }
  ready=$(curl -fsS "http://127.0.0.1:$HEALTH_PORT/readyz" 2>/dev/null || true)
  [ -n "$ready" ] && break; sleep 0.5
done
[ -n "$ready" ] || { pm logs "$WORKER" 2>&1 | tail -n 30 >&2; fail "/readyz never answered 200 within 60 s"; }
produced=$(produce events.jsonl)
say "produced: $produced"

say "waiting for the batches (debounce 2 s, tick 1 s)"
batches=0 orders=0 entries=0
for _ in $(seq 1 90); do
  read -r batches orders entries < <(count_batches)
  [ "$orders" -ge "$RECORDS" ] && break; sleep 1
done
dead=$(wc -l < "$WORK/out/dead-letter.jsonl" 2>/dev/null || echo 0)
[ "$orders" -eq "$RECORDS" ] && [ "$entries" -eq "$RECORDS" ] \
  || { pm logs "$WORKER" 2>&1 | tail -n 30 >&2; fail "$orders of $RECORDS orders in $batches batches ($entries member entries)"; }
[ "$dead" -ge 1 ] || fail "the poison record is not in the dead letter"
say "batches: $batches, holding each of the $RECORDS orders once; $dead record(s) dead-lettered"

pm healthcheck run "$WORKER" >/dev/null || fail "the image's HEALTHCHECK failed on a running worker"
curl -fsS "http://127.0.0.1:$HEALTH_PORT/healthz" >/dev/null || fail "/healthz did not answer 200"
metrics=$(curl -fsS "http://127.0.0.1:$HEALTH_PORT/metrics") || fail "/metrics did not answer 200"
grep -q '_total' <<<"$metrics" || fail "/metrics has no counter (_total)"
say "health: HEALTHCHECK ok, /healthz, /readyz and /metrics answer"

t0=$(date +%s.%N)
pm kill --signal TERM "$WORKER" >/dev/null
code=$(timeout "$(awk -v b="$STOP_BOUND_SECONDS" 'BEGIN { print b + 5 }')" podman --runtime runc wait "$WORKER" \
  || echo timeout)
STOP_SECONDS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ "$code" = 0 ] || { pm logs "$WORKER" 2>&1 | tail -n 30 >&2; fail "after SIGTERM the worker exited with '$code'"; }
awk -v s="$STOP_SECONDS" -v b="$STOP_BOUND_SECONDS" 'BEGIN { exit !(s < b) }' \
  || fail "the worker took ${STOP_SECONDS} s to stop (bound ${STOP_BOUND_SECONDS} s)"
! pm logs "$WORKER" 2>&1 | grep -q 'Traceback' || fail "the worker's log holds a traceback"
# Every record is durable by now (its batch is out), so the shutdown committed every offset.
read -r committed ends < <(once --entrypoint python3 "$IMAGE" -c '
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, group = sys.argv[1:]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
partitions = [TopicPartition(topic, p) for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions]
committed = sum(max(tp.offset, 0) for tp in consumer.committed(partitions, timeout=10))
ends = sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions)
consumer.close()
print(committed, ends)' "$BOOTSTRAP" "$TOPIC" "$KAFKA_GROUP")
[ "$committed" -eq "$ends" ] || fail "the group committed offsets up to $committed of $ends records after SIGTERM"
say "SIGTERM: exit 0 in ${STOP_SECONDS} s (bound ${STOP_BOUND_SECONDS} s); offsets of all $ends records committed"

say "PASS: image ${IMAGE_MB} MB built in ${BUILD_SECONDS} s ($BUILD_CACHED) on $base_python; $batches batches held $orders/$RECORDS records, $dead poison dead-lettered; health check ok; SIGTERM -> exit 0 in ${STOP_SECONDS} s, $committed/$ends offsets committed; total $(( $(date +%s) - T_START )) s"
