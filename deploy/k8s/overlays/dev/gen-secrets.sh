#!/usr/bin/env bash
# gen-secrets.sh: writes the dev overlay's secrets beside this script, each
# 32 random bytes (mode 600, git-ignored); kustomize makes the Secrets of
# them:
#   tokens.env    CAPSTAN_ADMIN_TOKEN, CAPSTAN_WORKER_TOKEN, CAPSTAN_CONTROL_PLANE_KEY
#   postgres.env  POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB (the in-cluster Postgres)
#   db.env        CAPSTAN_DATABASE_URL with that password
#   redis.env     CAPSTAN_REDIS_ADDR, CAPSTAN_REDIS_PASSWORD (the in-cluster Redis's requirepass)
# Existing values are kept; a secret tokens.env lacks is added to it.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
rnd() { head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }
umask 077
for v in CAPSTAN_ADMIN_TOKEN CAPSTAN_WORKER_TOKEN CAPSTAN_CONTROL_PLANE_KEY; do
  [ -f "$dir/tokens.env" ] && grep -q "^$v=" "$dir/tokens.env" && continue
  echo "$v=cap_$(rnd)" >>"$dir/tokens.env"
done
if [ ! -f "$dir/postgres.env" ] || [ ! -f "$dir/db.env" ]; then
  pw=$(rnd)
  printf 'POSTGRES_USER=capstan\nPOSTGRES_PASSWORD=%s\nPOSTGRES_DB=capstan\n' "$pw" >"$dir/postgres.env"
  echo "CAPSTAN_DATABASE_URL=postgres://capstan:$pw@capstan-postgres:5432/capstan?sslmode=disable" >"$dir/db.env"
fi
if [ ! -f "$dir/redis.env" ]; then
  printf 'CAPSTAN_REDIS_ADDR=capstan-redis:6379\nCAPSTAN_REDIS_PASSWORD=%s\n' "$(rnd)" >"$dir/redis.env"
fi
echo "gen-secrets: $dir/{tokens,postgres,db,redis}.env hold every secret" >&2
