#!/usr/bin/env bash
# demo.sh: `make up`, then run the example workflows end to end: the Go
# standard library line count (a DAG with parallel replicas) to SUCCEEDED
# with its result, then a long run that is aborted, showing the abort landed,
# then the standard library's TODO/FIXME notes (outputs passed as inputs, a
# condition over an output, an always clean-up) with its report, and a
# cached step run twice (the second time a cache hit), then a workflow
# template run by name with typed params and a schedule of it, then deploys
# that take turns on a concurrency key.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/up.sh
export CAPSTAN_API_URL=http://127.0.0.1:${CAPSTAN_API_PORT:-8080}
# The admin token up.sh generated: the CLI reads CAPSTAN_TOKEN.
CAPSTAN_TOKEN=$(sed -n 's/^CAPSTAN_ADMIN_TOKEN=//p' .data/tokens)
export CAPSTAN_TOKEN
capstan=bin/capstan

echo
echo "== 1. examples/stdlib-linecount.yaml: lines of Go per standard-library package"
run=$($capstan run create -f examples/stdlib-linecount.yaml)
echo "created run $run; following it:"
$capstan run wait "$run" --timeout 5m
echo
$capstan run get "$run"
echo
echo "result (stdout of step merge):"
$capstan logs "$run" merge

echo
echo "== 2. examples/long-sleep.yaml: a run that would sleep 10 minutes, aborted"
run2=$($capstan run create -f examples/long-sleep.yaml)
echo "created run $run2; waiting for its sleep step to run"
$capstan run wait "$run2" --until-step sleep=RUNNING --timeout 2m
$capstan run abort "$run2" --reason "demo: aborted on purpose"
$capstan run wait "$run2" --expect ABORTED --timeout 1m
$capstan run wait-abort "$run2" --timeout 1m
echo
$capstan run get "$run2"

echo
echo "== 3. examples/stdlib-notes.yaml: TODO/FIXME notes in the standard library"
echo "   (scan's outputs are report's inputs, hotspots has a condition over one, cleanup runs always)"
run3=$($capstan run create -f examples/stdlib-notes.yaml)
echo "created run $run3; following it:"
$capstan run wait "$run3" --timeout 5m
echo
$capstan run get "$run3"
echo
echo "result (stdout of step report):"
$capstan logs "$run3" report

echo
echo "== 4. examples/stdlib-packages-cached.yaml twice: a cached step runs once"
# The dev database outlives a demo: an entry an earlier demo stored would
# make both runs hits, so the step's entries are deleted first.
for key in $($capstan cache list | awk 'NR > 1 && $4 == "count" {print $1}'); do
  $capstan cache delete "$key" >/dev/null
done
for i in 1 2; do
  run4=$($capstan run create -f examples/stdlib-packages-cached.yaml)
  $capstan run wait "$run4" --timeout 5m >/dev/null
  $capstan run get "$run4"
done
echo "the second run's count step is a cache HIT: it ran no task. The entries:"
curl -fsS -H "Authorization: Bearer $CAPSTAN_TOKEN" "$CAPSTAN_API_URL/v1/projects/demo/domains/dev/cache"; echo

echo
echo "== 5. examples/templates/stdlib-grep.yaml: a workflow template run by name with typed params, and a schedule of it"
$capstan workflow push -f examples/templates/stdlib-grep.yaml
$capstan workflow list
run5=$($capstan run create --workflow stdlib-grep --param PATTERN='TODO|FIXME' --param ROOT=encoding --param TOP=3)
echo "created run $run5 of the template's latest version; following it:"
$capstan run wait "$run5" --timeout 5m
$capstan run get "$run5"
echo
echo "result (stdout of step top):"
$capstan logs "$run5" top
# A schedule an earlier demo made is made again from the file.
$capstan schedule delete stdlib-todo-hourly >/dev/null 2>&1 || true
$capstan schedule create -f examples/templates/stdlib-grep-hourly.yaml >/dev/null
$capstan schedule trigger stdlib-todo-hourly
echo "the schedule's next times, and the run the trigger started:"
for _ in $(seq 1 50); do # the firing loop starts it within its tick (1s)
  $capstan schedule get stdlib-todo-hourly | grep -q '^stdlib-todo-hourly-' && break
  sleep 0.2
done
$capstan schedule get stdlib-todo-hourly

echo
echo "== 6. examples/deploy-per-environment.yaml: one deploy at a time per environment (a concurrency key)"
first=$($capstan run create -f examples/deploy-per-environment.yaml --param ENV=prod)
second=$($capstan run create -f examples/deploy-per-environment.yaml --param ENV=prod)
other=$($capstan run create -f examples/deploy-per-environment.yaml --param ENV=staging)
$capstan run wait "$first" --until-step deploy=RUNNING --timeout 2m >/dev/null
echo "runs $first and $other deploy; $second waits for prod's slot:"
$capstan run get "$second" | head -3
$capstan concurrency list
for r in "$first" "$second" "$other"; do $capstan run wait "$r" --timeout 2m >/dev/null; done
echo "all three SUCCEEDED; $second started after $first ended"

echo
echo "== 7. what the scheduler's /metrics show (counted at most every 10s: CAPSTAN_METRICS_REFRESH)"
curl -fsS http://127.0.0.1:9091/metrics |
  grep -E '^capstan_(actions_active|tasks_active|workers|queue_latency_seconds)\{' | grep -v ' 0$' || true

echo
echo "Demo done. Dashboard: $CAPSTAN_API_URL/ui/?project=demo&domain=dev  (make down to stop)"
echo "To use the CLI or curl:  export CAPSTAN_TOKEN=$CAPSTAN_TOKEN"
