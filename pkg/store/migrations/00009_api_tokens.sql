-- +goose Up
-- API tokens: only the SHA-256 of the secret is kept (the secret is 32
-- random bytes, so a fast hash is enough; it is shown once, at creation).
-- projects empty = every project. A worker token minted at a worker's
-- registration names that worker and goes with it.
CREATE TABLE api_tokens (
    id          uuid        PRIMARY KEY,
    hash        bytea       NOT NULL UNIQUE,
    name        text        NOT NULL,
    role        text        NOT NULL CHECK (role IN ('admin', 'writer', 'reader', 'worker')),
    projects    text[]      NOT NULL DEFAULT '{}',
    worker_id   uuid        REFERENCES workers (id) ON DELETE CASCADE,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX api_tokens_worker ON api_tokens (worker_id) WHERE worker_id IS NOT NULL;

-- +goose Down
DROP TABLE api_tokens;
