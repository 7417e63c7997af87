#!/usr/bin/env bash
# gen-secrets.sh: writes the dev overlay's secrets beside this script, once,
# each 32 random bytes (mode 600, git-ignored); kustomize makes the Secrets
# of them:
#   tokens.env    CAPSTAN_ADMIN_TOKEN, CAPSTAN_WORKER_TOKEN, CAPSTAN_INTERNAL_TOKEN
#   postgres.env  POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB (the in-cluster Postgres)
#   db.env        CAPSTAN_DATABASE_URL with that password
#   redis.env     CAPSTAN_REDIS_ADDR, CAPSTAN_REDIS_PASSWORD (the in-cluster Redis's requirepass)
# Existing files are kept.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
if [ -f "$dir/tokens.env" ] && [ -f "$dir/postgres.env" ] && [ -f "$dir/db.env" ] && [ -f "$dir/redis.env" ]; then
  echo "gen-secrets: $dir/*.env exist; keeping them" >&2
  exit 0
fi
rnd() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }
umask 077
if [ ! -f "$dir/tokens.env" ]; then
  for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_INTERNAL_TOKEN; do echo "$v=cap_$(rnd)"; done >"$dir/tokens.env"
fi
if [ ! -f "$dir/postgres.env" ] || [ ! -f "$dir/db.env" ]; then
  pw=$(rnd)
  printf 'POSTGRES_USER=capstan\nPOSTGRES_PASSWORD=%s\nPOSTGRES_DB=capstan\n' "$pw" >"$dir/postgres.env"
  echo "CAPSTAN_DATABASE_URL=postgres://capstan:$pw@capstan-postgres:5432/capstan?sslmode=disable" >"$dir/db.env"
fi
if [ ! -f "$dir/redis.env" ]; then
  printf 'CAPSTAN_REDIS_ADDR=capstan-redis:6379\nCAPSTAN_REDIS_PASSWORD=%s\n' "$(rnd)" >"$dir/redis.env"
fi
echo "gen-secrets: wrote $dir/{tokens,postgres,db,redis}.env" >&2
