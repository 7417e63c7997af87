#!/usr/bin/env bash
# gen-tokens.sh: writes the dev overlay's secrets (the admin and worker
# tokens, the control plane's key) into tokens.env beside this script (mode
# 600, git-ignored): 32 random bytes each. kustomize makes the
# capstan-tokens Secret of it. An existing tokens.env keeps what it holds;
# a secret it lacks is added.
set -euo pipefail
umask 077
out=$(cd "$(dirname "$0")" && pwd)/tokens.env
rnd() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }
for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_CONTROL_PLANE_KEY; do
  [ -f "$out" ] && grep -q "^$v=" "$out" && continue
  echo "$v=cap_$(rnd)" >>"$out"
done
echo "gen-tokens: $out holds every secret" >&2
