#!/usr/bin/env bash
# down.sh: stop exactly what scripts/up.sh started, by pid file; Postgres and
# Redis too when up.sh was the one that started them.
#
# The executors go first, and are waited for: on SIGTERM an executor drains
# and then deregisters through the api (DELETE /v1/workers/{id}), so it must
# find the api still up, or its worker is left behind to be declared dead.
# Then the other services, then the deps.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=$root/.data/run
[ -d "$run" ] || { echo "nothing to stop"; exit 0; }

# An executor's drain lets running attempts finish for CAPSTAN_DRAIN_TIMEOUT
# (60s), kills the rest (CAPSTAN_SHUTDOWN_TIMEOUT, 10s), then deregisters
# (10s more at most): 90s covers it. An idle executor exits at once.
executor_wait=90
service_wait=10

# stop_all SECONDS PIDFILE...: SIGTERM every live process of the pid files,
# wait up to SECONDS for all of them to exit, SIGKILL what is left, and
# remove the pid files.
stop_all() {
  local secs=$1 f pid left; shift
  local -a live=()
  for f in "$@"; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null
      live+=("$f")
    else
      rm -f "$f"
    fi
  done
  for _ in $(seq 1 $((secs * 10))); do
    left=0
    for f in "${live[@]}"; do kill -0 "$(cat "$f")" 2>/dev/null && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for f in "${live[@]}"; do
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      echo "killed $(basename "$f" .pid) (pid $pid): still running after ${secs}s"
    else
      echo "stopped $(basename "$f" .pid) (pid $pid)"
    fi
    rm -f "$f"
  done
}

stop_all "$executor_wait" "$run"/executor-*.pid
services=()
for f in "$run"/*.pid; do
  [[ $(basename "$f") == executor-* ]] || services+=("$f")
done
stop_all "$service_wait" "${services[@]}"
if [ -f "$run/deps.started" ]; then
  "$root/scripts/dev-deps.sh" stop
  rm -f "$run/deps.started"
fi
