package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
)

// Retention (Argo's ttlStrategy, Temporal's namespace retention): a run's
// expiry is stamped by the statement that ends it, and the leader's
// reaper deletes expired runs oldest first (ReapExpired).

// ServerSettings is the project_settings row of the server's defaults.
const ServerSettings = ""

// expiresAtSQL is the expiry of the run row x moving to phase `to` (a
// text expression) at `now` (a timestamptz expression), terminal when
// `terminal` (a boolean expression): now plus the first of x's own ttl for
// the outcome, its project's retention for it, the server's (the row of
// project ServerSettings); NULL (kept) when none says, while the run is
// not terminal, and for a child run, which goes with its parent. It reads
// the project_settings rows of x's project and of the server.
func expiresAtSQL(x, to, now, terminal string) string {
	outcome := func(success, failure string) string {
		return `CASE WHEN ` + to + ` = '` + string(domain.PhaseSucceeded) + `' THEN ` + success + ` ELSE ` + failure + ` END`
	}
	layer := func(project string) string {
		return `(SELECT ` + outcome("s.retain_success_ms", "s.retain_failure_ms") +
			` FROM project_settings s WHERE s.project = ` + project + `)`
	}
	return `CASE WHEN ` + terminal + ` AND ` + x + `.parent_run IS NULL THEN ` + now + ` + make_interval(secs => COALESCE(` +
		outcome(x+".ttl_success_ms", x+".ttl_failure_ms") + `, ` + layer(x+".project") + `, ` +
		layer(`''`) + `) / 1000.0) END`
}

// ProjectSettings are a project's settings as PUT
// /v1/projects/{p}/settings sets them.
type ProjectSettings struct {
	// Retention is how long the project's ended runs are kept when their
	// spec has no ttl for their outcome; nil = the server's defaults.
	Retention *domain.TTL `json:"retention,omitempty"`
}

// Settings returns project's settings (the zero value until set; project
// ServerSettings: the server's defaults).
func (s Runs) Settings(ctx context.Context, project string) (ProjectSettings, error) {
	var out ProjectSettings
	if err := scanRows(s.raw(ctx, `SELECT settings FROM project_settings WHERE project = ?`, project), &out); err != nil &&
		!errors.Is(err, ErrNotFound) {
		return ProjectSettings{}, err
	}
	return out, nil
}

// SetSettings replaces project's settings (validated by the caller) and
// the retention they give each outcome, read by the expiry of the runs
// that end from then on (expiresAtSQL).
func (s Runs) SetSettings(ctx context.Context, project string, set ProjectSettings, now time.Time) error {
	raw, err := json.Marshal(set)
	if err != nil {
		return fmt.Errorf("encode settings: %w", err)
	}
	return mapErr(s.exec(ctx, `INSERT INTO project_settings (project, settings, retain_success_ms, retain_failure_ms, updated_at)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (project) DO UPDATE SET settings = excluded.settings, retain_success_ms = excluded.retain_success_ms,
	retain_failure_ms = excluded.retain_failure_ms, updated_at = excluded.updated_at`,
		project, string(raw), set.Retention.Millis(domain.PhaseSucceeded), set.Retention.Millis(domain.PhaseFailed), now).Error)
}

// ExpiredRuns returns up to limit runs expired by now that no restart
// waits for, oldest expiry first (runs_expiry). It locks nothing: a caller
// may archive them before ReapExpired deletes them.
func (s Runs) ExpiredRuns(ctx context.Context, now time.Time, limit int) ([]domain.RunKey, error) {
	var rows []Run
	if err := s.raw(ctx, `SELECT project, domain, name FROM runs
WHERE expires_at <= ? AND restart_requested_at IS NULL ORDER BY expires_at LIMIT ?`, now, limit).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	keys := make([]domain.RunKey, len(rows))
	for i, r := range rows {
		keys[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}
	}
	return keys, nil
}

// lockExpiredSQL locks the runs of k (runKeysCTE) still expired by @now
// with no restart waiting, skipping those another transaction holds.
var lockExpiredSQL = `WITH ` + runKeysCTE + `
SELECT r.project, r.domain, r.name FROM runs r JOIN k ON r.project = k.p AND r.domain = k.d AND r.name = k.n
WHERE r.expires_at <= @now AND r.restart_requested_at IS NULL
ORDER BY r.project, r.domain, r.name FOR UPDATE OF r SKIP LOCKED`

// postponeSQL moves the expiry of the runs of k (runKeysCTE) to @later.
var postponeSQL = `WITH ` + runKeysCTE + `
UPDATE runs r SET expires_at = @later FROM k WHERE r.project = k.p AND r.domain = k.d AND r.name = k.n`

// Reaped is what one ReapExpired call did: the runs it deleted (with their
// descendants) and the expired runs it could not delete yet.
type Reaped struct {
	// Runs is how many runs went, descendants included.
	Runs int
	// Deleted are the runs that went, descendants included; Workers the
	// ids of the alive workers that ran an attempt of them (the executors
	// that may keep their run directories).
	Deleted []domain.RunKey
	Workers []string
	// Postponed is how many expired runs may not be deleted yet (a run of
	// the tree has not ended, an abort is being delivered, an attempt is
	// live): their expiry moves to now + retry.
	Postponed int
}

// ReapExpired deletes, in one transaction, those of keys (ExpiredRuns)
// still expired by now, each with its descendant runs and every row they
// own, by DeleteRun's rules; a run another transaction holds is left for
// a later call, one that may not be deleted yet is postponed by retry. It
// locks the runs it deletes and their trees, and nothing else.
func (s Runs) ReapExpired(ctx context.Context, keys []domain.RunKey, now time.Time, retry time.Duration) (Reaped, error) {
	var out Reaped
	if len(keys) == 0 {
		return out, nil
	}
	err := s.inTx(ctx, func(tx *Store) error {
		out = Reaped{}
		args := keysArgs(keys)
		args["now"] = now
		var locked []Run
		if err := tx.raw(ctx, lockExpiredSQL, args).Scan(&locked).Error; err != nil {
			return mapErr(err)
		}
		roots := make([]domain.RunKey, len(locked))
		for i, r := range locked {
			roots[i] = domain.RunKey{Project: r.Project, Domain: r.Domain, Run: r.Name}
		}
		if len(roots) == 0 {
			return nil
		}
		trees, refused, err := tx.runs().deletionTrees(ctx, roots)
		if err != nil {
			return err
		}
		if len(refused) > 0 {
			later := make([]domain.RunKey, 0, len(refused))
			for k := range refused {
				later = append(later, k)
			}
			if err := tx.runs().PostponeExpiry(ctx, later, now.Add(retry)); err != nil {
				return err
			}
			out.Postponed = len(later)
		}
		out.Runs, out.Workers, err = tx.runs().deleteTrees(ctx, trees)
		for _, keys := range trees {
			out.Deleted = append(out.Deleted, keys...)
		}
		return err
	})
	return out, err
}

// PostponeExpiry moves the expiry of the runs keys to at: a run the
// reaper could not archive is tried again then.
func (s Runs) PostponeExpiry(ctx context.Context, keys []domain.RunKey, at time.Time) error {
	if len(keys) == 0 {
		return nil
	}
	args := keysArgs(keys)
	args["later"] = at
	return mapErr(s.exec(ctx, postponeSQL, args).Error)
}
