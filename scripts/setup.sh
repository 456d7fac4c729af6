#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine (only git and make needed beforehand).
#
#   scripts/setup.sh demo   what `make demo` needs: MariaDB, Redis, Python, the `cli` extra
#   scripts/setup.sh test   all of it (`make test`): + Java 17 (Spark), Node.js (CDK), the
#                           dev/spark/infra extras, the Lambda bundle's arm64 wheels, the
#                           IaC scanner (checkov, in .tools/checkov) and the SAM CLI (in .tools/sam)
#   scripts/setup.sh uv     only uv, into .tools/venv (for `make lock`)
#   scripts/setup.sh flink  Java 17 and Flink's own venv (.tools/flink), for the peer benchmarks
#
# Every download happens here, never in the tests: after one `test` set-up the suite runs with
# no network. Python dependencies come from uv.lock only (`uv sync --frozen`). MariaDB and Redis
# already listening on 127.0.0.1:3306/6379 are used as they are (and said so); otherwise they
# are started here (MariaDB as the `mysql` user), and a server that does not start has the tail
# of its own log printed. Servers started here are listed in .tools/run/started.pids.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PROFILE=${1:-test}
case "$PROFILE" in demo|test|uv|flink) ;; *) echo "usage: $0 [demo|test|uv|flink]" >&2; exit 2 ;; esac

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
STARTED_AT=$(date +%s)
LOGS=.tools/log; mkdir -p "$LOGS" .tools/run
SUMMARY=()
say() { echo "setup: $*"; }

# run_long LABEL LOGFILE CMD...: run CMD with its output in LOGFILE, say every 15 s that it is
# still running, and on failure print the log's tail. start_bg/wait_bg: the same, split in two
# so that something else runs meanwhile.
start_bg() {
  BG_LABEL=$1 BG_LOG=$2; shift 2
  BG_T0=$(date +%s)
  say "$BG_LABEL ..."
  "$@" >"$BG_LOG" 2>&1 &
  BG_PID=$!
}
wait_bg() {
  [ -n "${BG_PID:-}" ] || return 0
  local next=$((BG_T0 + 15)) now
  while kill -0 "$BG_PID" 2>/dev/null; do
    sleep 1; now=$(date +%s)
    if [ "$now" -ge "$next" ]; then say "  ... still $BG_LABEL ($((now - BG_T0)) s)"; next=$((now + 15)); fi
  done
  if ! wait "$BG_PID"; then
    say "FAILED: $BG_LABEL; last lines of $BG_LOG:" >&2
    tail -n 25 "$BG_LOG" >&2
    exit 1
  fi
  say "  done: $BG_LABEL, in $(( $(date +%s) - BG_T0 )) s"
  BG_PID=""
}
run_long() {
  local label=$1 log=$2; shift 2
  local t0 now next pid; t0=$(date +%s); next=$((t0 + 15))
  say "$label ..."
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1; now=$(date +%s)
    if [ "$now" -ge "$next" ]; then say "  ... still $label ($((now - t0)) s)"; next=$((now + 15)); fi
  done
  if ! wait "$pid"; then
    say "FAILED: $label; last lines of $log:" >&2
    tail -n 25 "$log" >&2
    exit 1
  fi
  say "  done in $(( $(date +%s) - t0 )) s"
}

# --- system packages ------------------------------------------------------------------------
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
apt_python=(); apt_rest=()
[ -f /etc/ssl/certs/ca-certificates.crt ] || apt_python+=(ca-certificates)
have python3 || apt_python+=(python3)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || apt_python+=(python3-venv)
if [ "$PROFILE" != uv ] && [ "$PROFILE" != flink ]; then
  have mariadbd || apt_rest+=(mariadb-server)
  have mysql || apt_rest+=(mariadb-client)
  have redis-server || apt_rest+=(redis-server)
  have redis-cli || apt_rest+=(redis-tools)
fi
if [ "$PROFILE" = test ] || [ "$PROFILE" = flink ]; then
  have java || apt_rest+=(openjdk-17-jre-headless)   # Spark tests
  [ "$PROFILE" = flink ] || have node || apt_rest+=(nodejs)  # CDK (jsii) tests; Debian's Node 18 will do
fi
apt_install() { env DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "$@"; }
if [ $((${#apt_python[@]} + ${#apt_rest[@]})) -gt 0 ]; then
  # A Java package's postinst needs this directory, which slim images lack.
  [ "$PROFILE" != test ] || $SUDO mkdir -p /usr/share/man/man1
  run_long "updating the apt package lists" "$LOGS/apt-update.log" $SUDO apt-get update
  [ ${#apt_python[@]} -eq 0 ] || run_long "installing ${apt_python[*]} (apt)" "$LOGS/apt-python.log" \
    apt_install "${apt_python[@]}"
  # The servers and runtimes install in the background while uv fetches the Python side.
  [ ${#apt_rest[@]} -eq 0 ] || start_bg "installing ${apt_rest[*]} (apt, in the background)" \
    "$LOGS/apt-install.log" apt_install "${apt_rest[@]}"
  SUMMARY+=("apt installed: $(echo ${apt_python[*]} ${apt_rest[*]})")
else
  SUMMARY+=("apt: every system package needed was already there")
fi

# --- uv, pinned by hash ---------------------------------------------------------------------
# Debian 12 marks its Python as externally managed (PEP 668): no `pip install --user`. uv goes
# into its own small venv under .tools/ (gitignored), pinned with hashes in uv-requirements.txt.
uv_stamp=.tools/venv/.uv-$(sha256sum scripts/uv-requirements.txt | cut -c1-16)
if [ ! -f "$uv_stamp" ]; then
  rm -rf .tools/venv
  # Debian's pip wheel runs in place: a venv without pip is made in a fraction of the time.
  pip_wheel=$(ls /usr/share/python-wheels/pip-*.whl 2>/dev/null | tail -n 1 || true)
  if [ -n "$pip_wheel" ]; then make_venv="python3 -m venv --without-pip .tools/venv"; pip=".tools/venv/bin/python $pip_wheel/pip"
  else make_venv="python3 -m venv .tools/venv"; pip=".tools/venv/bin/python -m pip"; fi
  run_long "installing uv into .tools/venv" "$LOGS/uv.log" bash -c "$make_venv && $pip install -q \
    --disable-pip-version-check --no-compile --require-hashes -r scripts/uv-requirements.txt"
  touch "$uv_stamp"
fi
UV="$REPO/.tools/venv/bin/uv"
# The system's Python (never a downloaded one), and the system's CA store: it holds any CA a
# proxy on the way to PyPI needs, which uv's bundled roots do not.
export UV_PYTHON_DOWNLOADS=never UV_PYTHON_PREFERENCE=only-system UV_SYSTEM_CERTS=true
[ "$PROFILE" != uv ] || { say "uv ready: $("$UV" --version) at .tools/venv/bin/uv"; exit 0; }

# --- Flink, for the peer benchmarks only ------------------------------------------------------
if [ "$PROFILE" = flink ]; then
  flink_stamp=.tools/flink/.req-$(sha256sum scripts/flink-requirements.txt | cut -c1-16)
  if [ ! -f "$flink_stamp" ]; then
    rm -rf .tools/flink
    run_long "installing Flink (apache-flink, locked by hash) into .tools/flink" "$LOGS/flink.log" bash -c \
      "python3 -m venv --without-pip .tools/flink && $UV pip install --python .tools/flink/bin/python \
       --require-hashes -r scripts/flink-requirements.txt"
    touch "$flink_stamp"
  fi
  wait_bg
  say "Flink ready: .tools/flink ($(.tools/flink/bin/python -c 'import importlib.metadata as m; print(m.version("apache-flink"))'))"
  exit 0
fi

# --- Python venv from uv.lock -----------------------------------------------------------------
if [ "$PROFILE" = demo ]; then
  # --inexact: keep what a `test` set-up installed; the demo needs only the cli extra.
  sync_args=(--extra cli --inexact); extras="cli"
else
  sync_args=(--extra dev --extra spark --extra infra); extras="dev, spark, infra"
fi
if ! "$UV" sync --frozen --offline "${sync_args[@]}" --dry-run 2>&1 | grep -q "Would make no changes"; then
  run_long "installing the locked Python dependencies (extras: $extras) into .venv" "$LOGS/uv-sync.log" \
    "$UV" sync --frozen --compile-bytecode --python python3 "${sync_args[@]}"
  SUMMARY+=("Python: $(grep -E '^(Installed|Uninstalled)' "$LOGS/uv-sync.log" | tr '\n' ' ')from uv.lock")
else
  SUMMARY+=("Python: .venv already matches uv.lock (extras: $extras)")
fi

wait_bg  # the servers' packages

# --- tools whose dependencies would clash with uv.lock, each in its own environment ---------
# .tools/NAME holds them, pinned by hash in scripts/NAME-requirements.txt (made from
# scripts/NAME-requirements.in; see there); a stamp of that file's hash skips an unchanged one.
tool_env() {  # NAME WHAT: install .tools/NAME from scripts/NAME-requirements.txt unless current
  local name=$1 what=$2 reqs=scripts/$1-requirements.txt stamp
  stamp=.tools/$name/.req-$(sha256sum "$reqs" | cut -c1-16)
  if [ ! -f "$stamp" ]; then
    rm -rf ".tools/$name"
    run_long "installing $what into .tools/$name" "$LOGS/$name.log" \
      bash -c "python3 -m venv --without-pip .tools/$name && '$UV' pip install --python .tools/$name/bin/python \
        --require-hashes --compile-bytecode -r $reqs"
    touch "$stamp"
  fi
}

if [ "$PROFILE" = test ]; then
  # the IaC scanner of make test (checkov), and the SAM CLI: `sam validate --lint`, `sam local
  # generate-event` and the Lambda Runtime Interface Emulator it ships, for the SAM tests
  tool_env checkov "checkov (the IaC scan of make test)"
  SUMMARY+=("IaC scan: checkov $(sed -n 's/^checkov==\([^ ]*\).*/\1/p' scripts/checkov-requirements.txt) in .tools/checkov")
  tool_env sam "the SAM CLI (the SAM tests of make test)"
  SUMMARY+=("SAM: aws-sam-cli $(sed -n 's/^aws-sam-cli==\([^ ]*\).*/\1/p' scripts/sam-requirements.txt) in .tools/sam")
fi

# --- MariaDB ----------------------------------------------------------------------------------
record_started() { grep -v "^$1 " .tools/run/started.pids 2>/dev/null > .tools/run/started.tmp || true
                   echo "$1 $2" >> .tools/run/started.tmp; mv .tools/run/started.tmp .tools/run/started.pids; }
mariadb_alive() { mysqladmin --connect-timeout=2 -h127.0.0.1 --protocol=tcp -uroot ping >/dev/null 2>&1 \
                  || mysqladmin --connect-timeout=2 --protocol=socket -uroot ping >/dev/null 2>&1; }
# "already running": by an earlier set-up (its pid is recorded and alive), or not ours.
earlier() { local pid; pid=$(awk -v n="$1" '$1 == n {print $2}' .tools/run/started.pids 2>/dev/null)
            if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "started by an earlier set-up (pid $pid)"
            else echo "already running, used as it is (not started by this project)"; fi; }
if mariadb_alive; then
  mariadb_how=$(earlier mariadb)
else
  mariadb_log=/var/log/mysql/consolidator-setup.err
  $SUDO mkdir -p /run/mysqld /var/log/mysql
  $SUDO chown mysql:mysql /run/mysqld /var/log/mysql
  if [ ! -d /var/lib/mysql/mysql ]; then
    run_long "creating the MariaDB data directory" "$LOGS/mariadb-install-db.log" \
      $SUDO mariadb-install-db --user=mysql --datadir=/var/lib/mysql
  fi
  say "starting MariaDB as the mysql user (log: $mariadb_log)"
  $SUDO rm -f "$mariadb_log"
  # mariadbd refuses to run as root: --user makes it drop to mysql. No --background: if it
  # dies we see it at once and print its own words.
  $SUDO setsid /usr/sbin/mariadbd --user=mysql --log-error="$mariadb_log" \
    --pid-file=/run/mysqld/mysqld.pid </dev/null >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    mariadb_alive && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! mariadb_alive; then
    say "MariaDB did not start. Its log ($mariadb_log) ends with:" >&2
    $SUDO tail -n 20 "$mariadb_log" >&2 || true
    kill "$pid" 2>/dev/null || true
    exit 1
  fi
  record_started mariadb "$pid"
  mariadb_how="started by set-up (pid $pid, log $mariadb_log)"
fi
if ! mysql -h127.0.0.1 -uroot -e "SELECT 1" >/dev/null 2>&1; then
  say "allowing root over TCP without a password (local development database)"
  $SUDO mysql -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')"
fi
mysql -h127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS consolidator_test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" \
  || { say "cannot use MariaDB on 127.0.0.1:3306 as root without a password" >&2; exit 1; }
SUMMARY+=("MariaDB $(mysql -h127.0.0.1 -uroot -N -e 'SELECT VERSION()') on 127.0.0.1:3306: $mariadb_how")

# --- Redis ------------------------------------------------------------------------------------
redis_alive() { [ "$(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" = PONG ]; }
if redis_alive; then
  redis_how=$(earlier redis)
else
  redis_log=/var/log/redis/consolidator-setup.log
  $SUDO mkdir -p /var/log/redis && $SUDO rm -f "$redis_log"
  say "starting Redis (log: $redis_log)"
  $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /tmp --logfile "$redis_log" --pidfile /run/consolidator-redis.pid || true
  for _ in $(seq 1 40); do redis_alive && break; sleep 0.25; done
  if ! redis_alive; then
    say "Redis did not start. Its log ($redis_log) ends with:" >&2
    $SUDO tail -n 20 "$redis_log" >&2 || true
    exit 1
  fi
  pid=$(cat /run/consolidator-redis.pid)
  record_started redis "$pid"
  redis_how="started by set-up (pid $pid, log $redis_log)"
fi
SUMMARY+=("Redis $(redis-cli -h 127.0.0.1 info server | sed -n 's/^redis_version:\([^\r]*\).*/\1/p') on 127.0.0.1:6379: $redis_how")

# --- Lambda bundle dependencies (arm64 wheels from the lock) ----------------------------------
if [ "$PROFILE" = test ]; then
  run_long "fetching the Lambda bundle's locked arm64 wheels" "$LOGS/bundle.log" \
    env UV="$UV" .venv/bin/python infra/bundle.py --fetch
  SUMMARY+=("Lambda dependencies: $(cut -f3 "$LOGS/bundle.log" | tail -n 1) ($(cut -f2 "$LOGS/bundle.log" | tail -n 1))")
fi

say "ready ($PROFILE) in $(( $(date +%s) - STARTED_AT )) s"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
echo "  venv: $REPO/.venv ($(.venv/bin/python --version)), uv: .tools/venv/bin/uv"
