#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: system packages, MariaDB and Redis running,
# root reachable over TCP without a password (local development only), and the Python venv.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
need_apt=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need_apt+=(mariadb-server)
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v make >/dev/null 2>&1 || need_apt+=(make)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if ! mysqladmin --protocol=socket -uroot ping >/dev/null 2>&1 && ! mysqladmin -h127.0.0.1 -uroot ping >/dev/null 2>&1; then
  echo "setup: starting MariaDB"
  $SUDO mkdir -p /run/mysqld && $SUDO chown mysql:mysql /run/mysqld 2>/dev/null || true
  $SUDO start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do mysqladmin -h127.0.0.1 -uroot ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
if ! mysql -h127.0.0.1 -uroot -e "SELECT 1" >/dev/null 2>&1; then
  echo "setup: allowing root over TCP without a password (local development database)"
  $SUDO mysql -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')"
fi
mysql -h127.0.0.1 -uroot -e "CREATE DATABASE IF NOT EXISTS consolidator_test CHARACTER SET utf8mb4 COLLATE utf8mb4_bin" \
  || { echo "setup: cannot reach MariaDB on 127.0.0.1:3306 as root" >&2; exit 1; }

if ! redis-cli -h 127.0.0.1 ping >/dev/null 2>&1; then
  echo "setup: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no
  for _ in $(seq 1 40); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.25; done
  redis-cli -h 127.0.0.1 ping >/dev/null || { echo "setup: Redis did not start" >&2; exit 1; }
fi

stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing Python dependencies into .venv (first run takes a few minutes)"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev,spark,infra]'
  rm -f .venv/.installed-* && touch "$stamp"
fi
echo "setup: ready"
