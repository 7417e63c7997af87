#!/usr/bin/env bash
# down.sh: stop exactly what scripts/up.sh started, by pid file; Postgres and
# Redis too when up.sh was the one that started them.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=$root/.data/run
[ -d "$run" ] || { echo "nothing to stop"; exit 0; }
for f in "$run"/*.pid; do
  [ -e "$f" ] || continue
  name=$(basename "$f" .pid); pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$f"
done
if [ -f "$run/deps.started" ]; then
  "$root/scripts/dev-deps.sh" stop
  rm -f "$run/deps.started"
fi
