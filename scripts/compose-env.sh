#!/usr/bin/env bash
# compose-env.sh: writes the secrets docker-compose.yml needs into .env at
# the repository's root (mode 600): the two bearer tokens, the control
# plane's key and the Postgres and Redis passwords, each 32 random bytes.
# An existing .env keeps what it holds, so the database keeps the password
# it was created with; a secret it lacks is added.
set -euo pipefail
umask 077
root=$(cd "$(dirname "$0")/.." && pwd)
env=$root/.env
rnd() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }
has() { [ -f "$env" ] && grep -q "^$1=" "$env"; }
existed=$([ -f "$env" ] && echo 1 || true)
{
  for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_CONTROL_PLANE_KEY; do has "$v" || echo "$v=cap_$(rnd)"; done
  for v in CAPSTAN_POSTGRES_PASSWORD CAPSTAN_REDIS_PASSWORD; do has "$v" || echo "$v=$(rnd)"; done
} >>"$env"
if [ -n "$existed" ]; then
  echo "compose-env: $env exists; kept it, adding any secret it lacked" >&2
  exit 0
fi
echo "compose-env: wrote $env; the CLI's token: export CAPSTAN_TOKEN=\$(sed -n 's/^CAPSTAN_ADMIN_TOKEN=//p' .env)" >&2
