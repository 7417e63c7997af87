-- +goose Up
-- The SHA-256 of the executor credential each worker's registration
-- answered: the bearer secret only the control plane and that worker's
-- executor know (HMAC-SHA256 of the worker id under
-- CAPSTAN_CONTROL_PLANE_KEY; the secret itself is stored nowhere). The
-- abort reconciler checks what it derives against it before it calls the
-- executor. NULL for a worker registered before it: its executor must
-- register again to be reachable.
ALTER TABLE workers ADD COLUMN credential_sha256 bytea;

-- +goose Down
ALTER TABLE workers DROP COLUMN credential_sha256;
