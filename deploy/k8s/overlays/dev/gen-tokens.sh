#!/usr/bin/env bash
# gen-tokens.sh: writes the dev overlay's bearer tokens (admin, worker,
# internal) into tokens.env beside this script (mode 600, git-ignored),
# once: 32 random bytes each. kustomize makes the capstan-tokens Secret of
# it. An existing tokens.env is kept.
set -euo pipefail
out=$(cd "$(dirname "$0")" && pwd)/tokens.env
if [ -f "$out" ]; then echo "gen-tokens: $out exists; keeping it" >&2; exit 0; fi
rnd() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }
(umask 077; for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_INTERNAL_TOKEN; do echo "$v=cap_$(rnd)"; done) >"$out"
echo "gen-tokens: wrote $out" >&2
