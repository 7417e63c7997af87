package server

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/capstan-run/capstan/pkg/domain"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/stretchr/testify/require"
)

// fuzzIntegrity checks the database after the fuzzing with SQL: the rules
// the API must never break, however it is called, and one run per 201.
func fuzzIntegrity(t *testing.T, db *sql.DB, created int64) {
	broken, err := integrityViolations(context.Background(), db)
	require.NoError(t, err)
	require.Empty(t, broken, "integrity")
	var runs int64
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM runs`).Scan(&runs))
	require.Equal(t, created, runs, "integrity: one run per 201 answer to CreateRun")
	t.Logf("fuzz: integrity holds over %d runs", runs)
}

// integrityViolations returns, by rule, a description of each row that
// breaks one of integrityRules or holds a spec domain.WorkflowSpec.Validate
// refuses (the API must not have written it).
func integrityViolations(ctx context.Context, db *sql.DB) (map[string][]string, error) {
	broken := map[string][]string{}
	for _, rule := range integrityRules {
		rows, err := db.QueryContext(ctx, rule.query)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rule.name, err)
		}
		for rows.Next() {
			var what string
			if err := rows.Scan(&what); err != nil {
				rows.Close()
				return nil, err
			}
			broken[rule.name] = append(broken[rule.name], what)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT project || '/' || domain || '/' || name, spec FROM runs`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var raw []byte
		if err := rows.Scan(&key, &raw); err != nil {
			return nil, err
		}
		if msg := refusedSpec(raw); msg != "" {
			broken["no run has a spec the API refuses"] = append(broken["no run has a spec the API refuses"], key+": "+msg)
		}
	}
	return broken, rows.Err()
}

// refusedSpec says why a stored spec is not one the API accepts, or "".
func refusedSpec(raw []byte) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec domain.WorkflowSpec
	if err := dec.Decode(&spec); err != nil {
		return err.Error()
	}
	if errs := spec.Validate("spec"); len(errs) > 0 {
		return errs[0].Error()
	}
	return ""
}

// integrityRules each select a description of every row that breaks them.
var integrityRules = []struct{ name, query string }{
	{"every run has exactly one root action a0", `
		SELECT r.project || '/' || r.domain || '/' || r.name FROM runs r
		WHERE (SELECT count(*) FROM actions a WHERE a.project = r.project AND a.domain = r.domain
			AND a.run_name = r.name AND a.name = 'a0' AND a.parent_action_name IS NULL) <> 1`},
	{"only a0 has no parent", `
		SELECT project || '/' || domain || '/' || run_name || '/' || name FROM actions
		WHERE (name = 'a0') <> (parent_action_name IS NULL)`},
	{"no action without its run", `
		SELECT a.project || '/' || a.domain || '/' || a.run_name || '/' || a.name FROM actions a
		WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.project = a.project AND r.domain = a.domain AND r.name = a.run_name)`},
	{"no action without its parent action", `
		SELECT a.project || '/' || a.domain || '/' || a.run_name || '/' || a.name FROM actions a
		WHERE a.parent_action_name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM actions p WHERE p.project = a.project
			AND p.domain = a.domain AND p.run_name = a.run_name AND p.name = a.parent_action_name)`},
	{"no task without its action", `
		SELECT 'task ' || t.id FROM tasks t WHERE NOT EXISTS (SELECT 1 FROM actions a WHERE a.project = t.project
			AND a.domain = t.domain AND a.run_name = t.run_name AND a.name = t.action_name)`},
	{"no attempt without its task", `
		SELECT 'attempt ' || at.id FROM attempts at WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = at.task_id)`},
	{"no logs without their attempt", `
		SELECT 'logs of attempt ' || l.attempt_id FROM attempt_logs l
		WHERE NOT EXISTS (SELECT 1 FROM attempts at WHERE at.id = l.attempt_id)`},
	{"task states are Iris values", `
		SELECT 'task ' || id || ' state ' || state FROM tasks WHERE state NOT BETWEEN 0 AND 10`},
	{"attempt states are Iris values", `
		SELECT 'attempt ' || id || ' state ' || state FROM attempts WHERE state NOT BETWEEN 0 AND 10`},
	{"a run's phase is its a0's", `
		SELECT r.project || '/' || r.domain || '/' || r.name || ': run ' || r.phase || ', a0 ' || a.phase FROM runs r
		JOIN actions a ON a.project = r.project AND a.domain = r.domain AND a.run_name = r.name AND a.name = 'a0'
		WHERE r.phase <> a.phase`},
}

// TestIntegrityRulesCatchBreakage breaks each rule fuzzIntegrity checks, with
// foreign keys off, and expects integrityViolations to report it.
func TestIntegrityRulesCatchBreakage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("pgx", storetest.NewURL(t))
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	const spec = `{"mode":"StepByStep","steps":[{"name":"s","kind":"task","plugin":"shell","command":"x","priority":"interactive"}]}`
	for _, q := range []string{
		`SET session_replication_role = replica`, // no foreign keys
		`INSERT INTO runs (project, domain, name, spec) VALUES ('p', 'd', 'no-root', '` + spec + `'),
			('p', 'd', 'phases', '` + spec + `'), ('p', 'd', 'bad-spec', '{"steps": []}')`,
		`INSERT INTO actions (project, domain, run_name, name, parent_action_name, kind, phase) VALUES
			('p', 'd', 'phases', 'a0', NULL, 'workflow', 'RUNNING'), ('p', 'd', 'bad-spec', 'a0', NULL, 'workflow', 'QUEUED'),
			('p', 'd', 'phases', 'orphan', 'gone', 'task', 'QUEUED'), ('p', 'd', 'phases', 'loose', NULL, 'task', 'QUEUED'),
			('p', 'd', 'ghost', 'a0', NULL, 'workflow', 'QUEUED')`,
		`INSERT INTO tasks (id, project, domain, run_name, action_name, idx, state) VALUES
			(1, 'p', 'd', 'phases', 'orphan', 0, 11), (2, 'p', 'd', 'phases', 'gone', 0, 1)`,
		`INSERT INTO attempts (id, task_id, number, state) VALUES (1, 1, 1, -1), (2, 99, 1, 1)`,
		`INSERT INTO attempt_logs (attempt_id) VALUES (99)`,
	} {
		_, err := conn.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	broken, err := integrityViolations(ctx, db)
	require.NoError(t, err)
	for _, rule := range integrityRules {
		require.NotEmpty(t, broken[rule.name], rule.name)
	}
	require.NotEmpty(t, broken["no run has a spec the API refuses"])
}
