#!/usr/bin/env bash
# up.sh: start Postgres and Redis (scripts/dev-deps.sh), build, migrate, and
# start the api, scheduler, abort-reconciler and two executors in the
# background, each with a pid file under .data/run and a log under .data/logs.
# Idempotent: services already running are left alone. `make down` stops them.
#
# Environment (defaults): CAPSTAN_API_PORT=8080, CAPSTAN_EXECUTORS=2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
run=$root/.data/run
logs=$root/.data/logs
mkdir -p "$run" "$logs"

deps_were_running=yes
status=$(scripts/dev-deps.sh status)
[[ $status == *"postgres: running"* && $status == *"redis: running"* ]] || deps_were_running=no
eval "$(scripts/dev-deps.sh start)"
[ "$deps_were_running" = yes ] || [ -f "$run/deps.started" ] || touch "$run/deps.started"
export CAPSTAN_DATABASE_URL CAPSTAN_REDIS_ADDR

make --no-print-directory build >/dev/null
bin/capstan-api migrate 2>>"$logs/migrate.log"

api_port=${CAPSTAN_API_PORT:-8080}
export CAPSTAN_API_ADDR=127.0.0.1:$api_port
export CAPSTAN_API_URL=http://127.0.0.1:$api_port
export CAPSTAN_DATA_DIR=$root/.data/executor

# The bootstrap admin token, the token executors register with and the
# control plane's key (which each worker's own credentials derive from):
# generated once into .data/tokens (mode 600), reused by every later `make
# up`; a secret the file lacks is added.
tokens=$root/.data/tokens
(umask 077; for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_CONTROL_PLANE_KEY; do
  [ -f "$tokens" ] && grep -q "^$v=" "$tokens" && continue
  echo "$v=cap_$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')" >>"$tokens"
done)
. "$tokens" # each service gets only the tokens it needs, below

alive() { [ -f "$run/$1.pid" ] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

start() { # name binary [env...]
  local name=$1 bin=$2; shift 2
  if alive "$name"; then echo "  $name already running (pid $(cat "$run/$name.pid"))"; return; fi
  env "$@" nohup "bin/$bin" >>"$logs/$name.log" 2>&1 &
  echo $! >"$run/$name.pid"
  echo "  $name started (pid $!, log .data/logs/$name.log)"
}

echo "starting Capstan:"
start api capstan-api CAPSTAN_ADMIN_TOKEN="$CAPSTAN_ADMIN_TOKEN" CAPSTAN_WORKER_TOKEN="$CAPSTAN_WORKER_TOKEN" CAPSTAN_CONTROL_PLANE_KEY="$CAPSTAN_CONTROL_PLANE_KEY"
start scheduler capstan-scheduler CAPSTAN_METRICS_ADDR=127.0.0.1:9091 CAPSTAN_CONTROL_PLANE_KEY="$CAPSTAN_CONTROL_PLANE_KEY"
start abort-reconciler capstan-abort-reconciler CAPSTAN_METRICS_ADDR=127.0.0.1:9092 CAPSTAN_CONTROL_PLANE_KEY="$CAPSTAN_CONTROL_PLANE_KEY"
# As root the executors sandbox each attempt (a user and namespaces of its
# own); anyone else may not, and runs every attempt as themselves.
if [ "$(id -u)" -ne 0 ] && [ -z "${CAPSTAN_EXECUTOR_INSECURE:-}" ]; then
  echo "  not root: the executors run every attempt as $(id -un), without a sandbox (CAPSTAN_EXECUTOR_INSECURE=1)"
  export CAPSTAN_EXECUTOR_INSECURE=1
fi
for i in $(seq 1 "${CAPSTAN_EXECUTORS:-2}"); do
  start "executor-$i" capstan-executor CAPSTAN_EXECUTOR_NAME="executor-$i" CAPSTAN_EXECUTOR_ADDR=127.0.0.1:0 CAPSTAN_WORKER_TOKEN="$CAPSTAN_WORKER_TOKEN"
done

wait_for() { # description command...
  local what=$1; shift
  for _ in $(seq 1 150); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "timed out waiting for $what; see .data/logs/" >&2
  return 1
}
wait_for "api /readyz" curl -fsS "$CAPSTAN_API_URL/readyz"
wait_for "scheduler /readyz" curl -fsS http://127.0.0.1:9091/readyz
wait_for "abort-reconciler /readyz" curl -fsS http://127.0.0.1:9092/readyz
workers_alive() { [ "$(CAPSTAN_TOKEN=$CAPSTAN_ADMIN_TOKEN bin/capstan workers | grep -c ' alive ')" -ge "${CAPSTAN_EXECUTORS:-2}" ]; }
wait_for "executors to register" workers_alive

echo
echo "Capstan is up."
echo "  API        $CAPSTAN_API_URL   (OpenAPI: openapi/capstan.yaml)"
echo "  Dashboard  $CAPSTAN_API_URL/ui/"
echo "  Metrics    $CAPSTAN_API_URL/metrics (admin token), http://127.0.0.1:9091/metrics, http://127.0.0.1:9092/metrics"
echo "  Queues     $CAPSTAN_API_URL/queues/ (asynqmon, admin token)"
echo "  CLI        bin/capstan --help"
echo "  Token      export CAPSTAN_TOKEN=$CAPSTAN_ADMIN_TOKEN   (admin; also in .data/tokens)"
echo "  Stop       make down"
