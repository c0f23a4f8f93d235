#!/usr/bin/env bash
# services.sh: make sure the services the distributed backends' tests use
# are installed and running on this Debian machine:
#   Redis   on 127.0.0.1:6379, nothing kept on disk (no RDB, no AOF);
#   MariaDB on 127.0.0.1:3306, user root without a password over TCP.
# Installs what is missing (apt-get), starts what is not answering, and waits
# until both answer. Idempotent, and silent when everything is already up.
# Needs root (or sudo) only when something must be installed or started.
#
# Usage: scripts/services.sh        (CI calls it from .ci/run)
set -euo pipefail

readonly REDIS_PORT=6379
readonly MYSQL_PORT=3306
readonly MARIADBD=/usr/sbin/mariadbd
readonly MYSQL_PIDFILE=/run/mysqld/mysqld.pid
readonly WAIT_SECONDS=60

say() { echo "services.sh: $*" >&2; }
die() { say "$*"; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root to run: $*"
  fi
}

apt_updated=
apt_install() { # apt_install PACKAGE...
  if [ -z "$apt_updated" ]; then
    say "apt-get update"
    as_root apt-get update -qq
    apt_updated=1
  fi
  say "installing $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# wait_for WHAT COMMAND...: poll COMMAND until it succeeds or WAIT_SECONDS pass.
wait_for() {
  local what=$1; shift
  local deadline=$((SECONDS + WAIT_SECONDS))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what did not answer within ${WAIT_SECONDS}s"
    sleep 0.2
  done
}

# --- Redis -------------------------------------------------------------------

redis_up() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

ensure_redis() {
  if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    apt_install redis-server
  fi
  redis_up && return 0
  say "starting redis-server on 127.0.0.1:$REDIS_PORT"
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no >/dev/null
  wait_for "redis on 127.0.0.1:$REDIS_PORT" redis_up
}

# --- MariaDB -----------------------------------------------------------------

mysql_socket_up() { as_root mariadb -uroot -e 'select 1'; }
mysql_tcp_up() { mariadb --protocol=tcp -h 127.0.0.1 -P "$MYSQL_PORT" -uroot -e 'select 1'; }

ensure_mariadb() {
  if [ ! -x "$MARIADBD" ] || ! command -v mariadb >/dev/null 2>&1; then
    apt_install mariadb-server mariadb-client
  fi
  mysql_tcp_up >/dev/null 2>&1 && return 0

  if ! mysql_socket_up >/dev/null 2>&1; then
    as_root install -d -o mysql -g mysql -m 0755 /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then
      say "initialising /var/lib/mysql"
      as_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null 2>&1 ||
        die "mariadb-install-db failed; run it by hand to see why"
    fi
    say "starting mariadbd"
    # Matched by pid file as well as executable, so a mariadbd of another
    # instance (or container) does not pass for ours.
    as_root start-stop-daemon --start --oknodo --background --pidfile "$MYSQL_PIDFILE" \
      --exec "$MARIADBD" -- --user=mysql --pid-file="$MYSQL_PIDFILE"
    wait_for "mariadb (socket)" mysql_socket_up
  fi

  if ! mysql_tcp_up >/dev/null 2>&1; then
    # Debian's root logs in by unix_socket only; the tests log in over TCP.
    # With skip-name-resolve 127.0.0.1 is its own host, so allow both.
    say "allowing root without a password over TCP"
    as_root mariadb -uroot <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED VIA mysql_native_password USING PASSWORD('');
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
  fi
  wait_for "mariadb on 127.0.0.1:$MYSQL_PORT (TCP, root without password)" mysql_tcp_up
}

ensure_redis
ensure_mariadb
