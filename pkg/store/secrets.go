package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// AttemptSecretValues returns the secret_env values of the step attempt id
// runs, for masking its output; nil when it has none or there is no such
// attempt.
func (s Attempts) AttemptSecretValues(ctx context.Context, id int64) ([]string, error) {
	var raw []byte
	err := scanRow(s.raw(ctx, `SELECT ac.spec->'secret_env' FROM attempts at
		JOIN tasks t ON t.id = at.task_id
		JOIN actions ac ON (ac.project, ac.domain, ac.run_name, ac.name) = (t.project, t.domain, t.run_name, t.action_name)
		WHERE at.id = ?`, id), &raw)

	if errors.Is(err, sql.ErrNoRows) || len(raw) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	var env map[string]string
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("secret_env of attempt %d: %w", id, err)
	}
	return slices.Collect(maps.Values(env)), nil
}
