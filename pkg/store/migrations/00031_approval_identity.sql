-- +goose Up
-- Who decided an approval, as the api authenticated them: the bearer
-- token's id (api_tokens.id, or "admin" for the bootstrap token) and its
-- name at the time. decided_by stays the label the caller sent (by), which
-- nothing checks. Decisions made before are NULL here.
ALTER TABLE actions ADD COLUMN decided_by_token_id text,
    ADD COLUMN decided_by_token_name text;

-- +goose Down
ALTER TABLE actions DROP COLUMN decided_by_token_name, DROP COLUMN decided_by_token_id;
