#!/usr/bin/env bash
# dev-deps.sh {start|stop|status|env|restart-postgres}
#
# Starts a private Postgres cluster and a private Redis for Capstan on loopback
# ports of our own, with all data under .data/ (ignored by git). Idempotent: a
# second `start` is a no-op. It uses the Postgres server binaries (initdb,
# pg_ctl, postgres) on PATH, else Debian's /usr/lib/postgresql/<major>/bin,
# else Homebrew's (postgresql@<major> under `brew --prefix`), and
# redis-server and redis-sentinel (the e2e Sentinel test runs one) on PATH
# or Homebrew's. What is missing it installs from Debian's packages where
# apt-get exists; elsewhere it stops with a message naming what to install.
# initdb refuses to run as root, so when run as
# root the cluster belongs to an unprivileged user (postgres if it exists,
# else a system user created for the purpose).
#
# Environment (defaults):
#   CAPSTAN_PG_PORT=55432     CAPSTAN_REDIS_PORT=56379
#   CAPSTAN_DATA_DIR=<repo>/.data
#   CAPSTAN_PG_LIBDIR=/usr/lib/postgresql   (where Debian keeps server binaries)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
data=${CAPSTAN_DATA_DIR:-$root/.data}
pg_port=${CAPSTAN_PG_PORT:-55432}
redis_port=${CAPSTAN_REDIS_PORT:-56379}
pg_libdir=${CAPSTAN_PG_LIBDIR:-/usr/lib/postgresql}
pg_dir=$data/postgres
redis_dir=$data/redis
# Each test leases a database of its own (pkg/redistest; database 0 holds the
# leases), so the count bounds how many tests use Redis at once.
redis_databases=64
pg_db=capstan
pg_role=capstan

log() { printf 'dev-deps: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root to run: $*"; return 1; fi
}

# pg_user prints the OS user that owns the cluster.
pg_user() {
  if [ "$(id -u)" -ne 0 ]; then id -un; return; fi
  if id postgres >/dev/null 2>&1; then echo postgres; return; fi
  if ! id capstan-pg >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin capstan-pg
  fi
  echo capstan-pg
}

# as_pg runs a command as the cluster's owner.
as_pg() {
  local u; u=$(pg_user)
  if [ "$u" = "$(id -un)" ]; then "$@"; else runuser -u "$u" -- "$@"; fi
}

# pg_bindir prints the directory of the Postgres server binaries: the one
# holding initdb on PATH, else Debian's newest /usr/lib/postgresql/<major>/bin
# (Debian keeps them off PATH); nothing when neither has them.
pg_bindir() {
  local b d
  if b=$(command -v initdb) && [ -x "$(dirname "$b")/pg_ctl" ] && [ -x "$(dirname "$b")/postgres" ]; then
    dirname "$b"; return
  fi
  for d in $(ls -d "$pg_libdir"/*/bin 2>/dev/null | sort -t/ -k"$(($(tr -cd / <<<"$pg_libdir" | wc -c) + 2))" -n -r) \
    $(ls -d "$(brew_prefix)"/opt/postgresql@*/bin 2>/dev/null | sort -t@ -k2 -n -r); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && { echo "$d"; return; }
  done
}

# brew_prefix prints Homebrew's prefix, or nothing without Homebrew.
brew_prefix() {
  if command -v brew >/dev/null; then brew --prefix; return; fi
  local d
  for d in /opt/homebrew /usr/local /home/linuxbrew/.linuxbrew; do
    if [ -x "$d/bin/brew" ]; then echo "$d"; return; fi
  done
  return 0
}

# missing stops with what to install where there is no apt-get.
missing() { # what
  log "no $1 found on PATH, under /usr/lib/postgresql or Homebrew's prefix, and no apt-get to install it."
  log "install it, then run this again: macOS 'brew install postgresql@15 redis'," \
    "Fedora 'dnf install postgresql-server redis', Alpine 'apk add postgresql redis', Arch 'pacman -S postgresql redis'"
  exit 1
}

# apt_install installs Debian packages, then stops the system-wide instance
# a package may have started: we run private ones on our own ports.
apt_install() { # service-to-stop package...
  local svc=$1; shift
  command -v apt-get >/dev/null || missing "$*"
  log "installing $* from Debian's packages"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  as_root service "$svc" stop >/dev/null 2>&1 || true
}

# find_pg_bin puts the Postgres server binaries on PATH, installing Debian's
# postgresql package when there are none.
find_pg_bin() {
  local d; d=$(pg_bindir)
  if [ -z "$d" ]; then
    apt_install postgresql postgresql
    d=$(pg_bindir)
  fi
  [ -n "$d" ] || { log "no Postgres server binaries (initdb, pg_ctl, postgres) after installing postgresql"; exit 1; }
  PATH=$d:$PATH
}

# pg_ctl_as_pg runs the server's pg_ctl (Debian's is off PATH) as the cluster's owner.
pg_ctl_as_pg() {
  local d; d=$(pg_bindir)
  [ -n "$d" ] || return 1
  as_pg "$d/pg_ctl" "$@"
}

ensure_redis() {
  local b; b=$(brew_prefix)
  if ! command -v redis-server >/dev/null && [ -n "$b" ] && [ -x "$b/bin/redis-server" ]; then PATH=$b/bin:$PATH; fi
  command -v redis-server >/dev/null || apt_install redis-server redis-server
  command -v redis-sentinel >/dev/null || apt_install redis-sentinel redis-sentinel
}

pg_running() { pg_ctl_as_pg -D "$pg_dir" status >/dev/null 2>&1; }
redis_running() { redis-cli -h 127.0.0.1 -p "$redis_port" ping >/dev/null 2>&1; }

pg_answers() { psql -h 127.0.0.1 -p "$pg_port" -U "$pg_role" -d postgres -tAc 'select 1' >/dev/null 2>&1; }

start_pg() {
  if ! pg_running && pg_answers; then
    # Another checkout's cluster (or an earlier start) already serves this port.
    log "postgres already answering on $pg_port; using it"
    ensure_db
    return
  fi
  find_pg_bin
  mkdir -p "$data"
  local u; u=$(pg_user)
  if [ ! -s "$pg_dir/PG_VERSION" ]; then
    log "initdb $pg_dir (owner $u)"
    mkdir -p "$pg_dir"
    chown "$u" "$pg_dir" 2>/dev/null || true
    chmod 700 "$pg_dir"
    as_pg "$(pg_bindir)/initdb" -D "$pg_dir" -U "$pg_role" --auth=trust -E UTF8 --locale=C >/dev/null
    cat >>"$pg_dir/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 256MB
EOF
  fi
  if pg_running; then log "postgres already running on $pg_port"; else
    log "starting postgres on 127.0.0.1:$pg_port"
    pg_ctl_as_pg -D "$pg_dir" -o "-p $pg_port" -l "$pg_dir/server.log" -w -t 60 start >/dev/null
  fi
  ensure_db
}

ensure_db() {
  if ! psql -h 127.0.0.1 -p "$pg_port" -U "$pg_role" -d postgres -tAc \
      "select 1 from pg_database where datname='$pg_db'" | grep -q 1; then
    createdb -h 127.0.0.1 -p "$pg_port" -U "$pg_role" "$pg_db"
  fi
}

start_redis() {
  ensure_redis
  mkdir -p "$redis_dir"
  if redis_running; then
    log "redis already running on $redis_port"
    local dbs
    dbs=$(redis-cli -h 127.0.0.1 -p "$redis_port" config get databases 2>/dev/null | tail -n1) || dbs=
    if [[ $dbs =~ ^[0-9]+$ ]] && [ "$dbs" -lt "$redis_databases" ]; then
      log "redis has $dbs databases, so at most $((dbs - 1)) tests use it at once; $0 stop, then start, gives it $redis_databases"
    fi
    return
  fi
  log "starting redis on 127.0.0.1:$redis_port"
  redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$redis_dir" \
    --daemonize yes --pidfile "$redis_dir/redis.pid" --logfile "$redis_dir/redis.log" \
    --save '' --appendonly no --protected-mode no --databases "$redis_databases" >/dev/null
  for _ in $(seq 1 100); do redis_running && return; sleep 0.1; done
  log "redis did not answer on $redis_port"; exit 1
}

stop_all() {
  if [ -s "$pg_dir/PG_VERSION" ] && pg_running; then
    log "stopping postgres"; pg_ctl_as_pg -D "$pg_dir" -m fast -w stop >/dev/null
  fi
  if redis_running; then log "stopping redis"; redis-cli -h 127.0.0.1 -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true; fi
}

print_env() {
  echo "CAPSTAN_DATABASE_URL=postgres://$pg_role@127.0.0.1:$pg_port/$pg_db?sslmode=disable"
  echo "CAPSTAN_REDIS_ADDR=127.0.0.1:$redis_port"
}

case "${1:-start}" in
  start) start_pg; start_redis; print_env ;;
  stop) stop_all ;;
  status)
    { pg_running || pg_answers; } && echo "postgres: running on 127.0.0.1:$pg_port" || echo "postgres: stopped"
    redis_running && echo "redis: running on 127.0.0.1:$redis_port" || echo "redis: stopped" ;;
  env) print_env ;;
  restart-postgres)
    dir=$pg_dir
    if ! pg_running && pg_answers; then
      # Another checkout's cluster serves the port (see start_pg): restart that one.
      dir=$(psql -h 127.0.0.1 -p "$pg_port" -U "$pg_role" -d postgres -tAc 'SHOW data_directory') || exit 1
    fi
    pg_ctl_as_pg -D "$dir" -o "-p $pg_port" -l "$dir/server.log" -m fast -w -t 60 restart >/dev/null ;;
  *) echo "usage: $0 {start|stop|status|env|restart-postgres}" >&2; exit 2 ;;
esac
