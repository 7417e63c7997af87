#!/usr/bin/env bash
# compose-env.sh: writes the secrets docker-compose.yml needs into .env at
# the repository's root (mode 600), once: the three bearer tokens and the
# Postgres and Redis passwords, each 32 random bytes. An existing .env is
# kept as it is, so the database keeps the password it was created with.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env=$root/.env
if [ -f "$env" ]; then
  echo "compose-env: $env exists; keeping it" >&2
  exit 0
fi
rnd() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }
(umask 077
  for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_INTERNAL_TOKEN; do echo "$v=cap_$(rnd)"; done
  echo "CAPSTAN_POSTGRES_PASSWORD=$(rnd)"
  echo "CAPSTAN_REDIS_PASSWORD=$(rnd)"
) >"$env"
echo "compose-env: wrote $env; the CLI's token: export CAPSTAN_TOKEN=\$(sed -n 's/^CAPSTAN_ADMIN_TOKEN=//p' .env)" >&2
