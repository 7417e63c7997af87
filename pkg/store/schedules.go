package store

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gorm.io/gorm/clause"
)

// Schedule is a row of schedules: what a schedule starts (a template
// version and its params, as given), when (Spec), and its firing state.
type Schedule struct {
	Project string `gorm:"primaryKey" json:"project"`
	Domain  string `gorm:"primaryKey" json:"domain"`
	Name    string `gorm:"primaryKey" json:"name"`
	// WorkflowName and WorkflowVersion name the template the runs are of;
	// a nil version is the latest at each firing.
	WorkflowName    string              `json:"workflow_name"`
	WorkflowVersion *int                `json:"workflow_version"`
	Params          map[string]any      `gorm:"serializer:json" json:"params"`
	Spec            domain.ScheduleSpec `gorm:"serializer:json" json:"spec"`
	// Paused stops the automatic times.
	Paused bool `json:"paused"`
	// CursorAt is the latest automatic time decided.
	CursorAt time.Time `json:"cursor_at"`
	// Pending are the times triggers and backfills asked for, by time;
	// Buffered the times waiting for the running runs to end, oldest first.
	Pending  []domain.PendingTime `gorm:"serializer:json" json:"pending"`
	Buffered []time.Time          `gorm:"serializer:json" json:"buffered"`
	// MissedCatchupWindow and SkippedOverlap count the times not started.
	MissedCatchupWindow int64 `json:"missed_catchup_window"`
	SkippedOverlap      int64 `json:"skipped_overlap"`
	// CheckAt is when the firing loop looks at the schedule next; nil while
	// nothing can come.
	CheckAt *time.Time `json:"check_at"`
	// Version counts the changes made through the API (not the firings);
	// UpdatedAt is the latest of them.
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// TableName is schedules.
func (Schedule) TableName() string { return "schedules" }

// Key returns the schedule's key.
func (sc Schedule) Key() ScheduleKey { return ScheduleKey{sc.Project, sc.Domain, sc.Name} }

// withEmpty returns sc with nil Params, Pending and Buffered as empty
// values, which the columns hold for none.
func (sc Schedule) withEmpty() Schedule {
	if sc.Params == nil {
		sc.Params = map[string]any{}
	}
	if sc.Pending == nil {
		sc.Pending = []domain.PendingTime{}
	}
	if sc.Buffered == nil {
		sc.Buffered = []time.Time{}
	}
	return sc
}

// ScheduleKey names a schedule in a project and domain.
type ScheduleKey struct{ Project, Domain, Name string }

// String is "project/domain/name".
func (k ScheduleKey) String() string { return k.Project + "/" + k.Domain + "/" + k.Name }

// CreateSchedule inserts sc, version 1, created and updated now, and
// returns it as stored. Errors: ErrConflict when the name is taken.
func (s Schedules) CreateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	sc = sc.withEmpty()
	sc.Version, sc.CreatedAt = 1, dbNow()
	sc.UpdatedAt = sc.CreatedAt
	if err := s.q(ctx).Create(&sc).Error; err != nil {
		return Schedule{}, mapErr(err)
	}
	return sc, nil
}

// GetSchedule returns a schedule. Errors: ErrNotFound.
func (s Schedules) GetSchedule(ctx context.Context, key ScheduleKey) (Schedule, error) {
	var sc Schedule
	err := s.q(ctx).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Name).Take(&sc).Error
	return sc, mapErr(err)
}

// LockSchedule returns a schedule and locks its row (FOR UPDATE) until the
// transaction ends: a firing holding it is waited for. Errors: ErrNotFound.
func (s Schedules) LockSchedule(ctx context.Context, key ScheduleKey) (Schedule, error) {
	var sc Schedule
	err := s.q(ctx).Clauses(clause.Locking{Strength: "UPDATE"}).
		Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Name).Take(&sc).Error
	return sc, mapErr(err)
}

// ListSchedules returns a page of the schedules of project/domain by name,
// after cursor (the last name of the previous page), and the next page's
// cursor ("" on the last); limit is 1 to 500, default 50. Errors:
// ErrBadCursor (no schedule name).
func (s Schedules) ListSchedules(ctx context.Context, project, dom, cursor string, limit int) ([]Schedule, string, error) {
	if cursor != "" && !domain.ValidName(cursor) {
		return nil, "", ErrBadCursor
	}
	limit = min(max(cmp.Or(limit, 50), 1), 500)
	var out []Schedule
	err := s.q(ctx).Where("project = ? AND domain = ? AND name > ?", project, dom, cursor).
		Order("name").Limit(limit + 1).Find(&out).Error
	if err != nil {
		return nil, "", mapErr(err)
	}
	if len(out) <= limit {
		return out, "", nil
	}
	return out[:limit], out[limit-1].Name, nil
}

// updateScheduleSQL writes a schedule's definition and the firing state an
// API change sets (paused, cursor_at, pending, check_at), bumps its
// version and returns the new version; the counters and the buffer are the
// firings'.
const updateScheduleSQL = `UPDATE schedules SET workflow_name = @workflow_name, workflow_version = @workflow_version,
	params = CAST(@params AS jsonb), spec = CAST(@spec AS jsonb), paused = @paused, cursor_at = @cursor_at,
	pending = CAST(@pending AS jsonb), check_at = @check_at, version = version + 1, updated_at = @now
 WHERE project = @project AND domain = @domain AND name = @name
RETURNING version`

// UpdateSchedule writes sc's definition (workflow, params, spec) and its
// Paused, CursorAt, Pending and CheckAt, as of now, and returns the
// schedule as stored. The caller holds the row (LockSchedule), so nothing
// else changed it meanwhile. Errors: ErrNotFound.
func (s Schedules) UpdateSchedule(ctx context.Context, sc Schedule) (Schedule, error) {
	sc = sc.withEmpty()
	args := map[string]any{"project": sc.Project, "domain": sc.Domain, "name": sc.Name,
		"workflow_name": sc.WorkflowName, "workflow_version": sc.WorkflowVersion, "paused": sc.Paused,
		"cursor_at": sc.CursorAt, "check_at": sc.CheckAt, "now": dbNow()}
	for col, v := range map[string]any{"params": sc.Params, "spec": sc.Spec, "pending": sc.Pending} {
		j, err := encodeRows(v)
		if err != nil {
			return Schedule{}, fmt.Errorf("schedule %s: %s: %w", sc.Key(), col, err)
		}
		args[col] = string(j)
	}
	var versions []int64
	if err := s.raw(ctx, updateScheduleSQL, args).Scan(&versions).Error; err != nil {
		return Schedule{}, mapErr(err)
	}
	if len(versions) == 0 {
		return Schedule{}, ErrNotFound
	}
	sc.Version, sc.UpdatedAt = versions[0], args["now"].(time.Time)
	return sc, nil
}

// DeleteSchedule deletes a schedule; its runs stay. A firing holding the
// row is waited for. Errors: ErrNotFound.
func (s Schedules) DeleteSchedule(ctx context.Context, key ScheduleKey) error {
	res := s.q(ctx).Where("project = ? AND domain = ? AND name = ?", key.Project, key.Domain, key.Name).
		Delete(&Schedule{})
	if res.Error != nil {
		return mapErr(res.Error)
	}
	if res.RowsAffected == 0 {
		return ErrNotFound
	}
	return nil
}

// lockDueSchedulesSQL locks up to @limit schedules due at @now (check_at
// not after it), the longest due first, skipping those another
// transaction holds (a firing elsewhere, an API change), and returns them
// as a JSON array. It never waits, so the order of its locks needs none.
const lockDueSchedulesSQL = `WITH due AS (
	SELECT * FROM schedules WHERE check_at <= @now ORDER BY check_at LIMIT @limit FOR UPDATE SKIP LOCKED)
SELECT coalesce(json_agg(due ORDER BY due.project, due.domain, due.name), '[]') FROM due`

// LockDueSchedules locks (FOR UPDATE SKIP LOCKED) and returns up to limit
// schedules whose check_at is not after now, by key; held until the
// transaction ends. As a transaction's first statement it begins it on
// the by-key pool, whose plans the firing's reads by key need: a plan made
// while runs is nearly empty would otherwise scan it for every schedule.
func (s Schedules) LockDueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error) {
	var raw []byte
	q := s.prefer(poolByKey).raw(ctx, lockDueSchedulesSQL, map[string]any{"now": now, "limit": limit})
	if err := scanRow(q, &raw); err != nil {
		return nil, mapErr(err)
	}
	var out []Schedule
	if err := decodeRows(raw, &out); err != nil {
		return nil, fmt.Errorf("decode schedules: %w", err)
	}
	return out, nil
}

// keyArrays returns the projects, domains and names of keys as three
// Postgres array parameters.
func keyArrays(keys []ScheduleKey) (p, d, n any) {
	ps, ds, ns := make([]string, len(keys)), make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		ps[i], ds[i], ns[i] = k.Project, k.Domain, k.Name
	}
	return array(ps), array(ds), array(ns)
}

// liveScheduledRunsSQL reads the runs not yet ended of the schedules of
// three arrays (projects, domains, names), through runs_schedule_live,
// in key order. Each schedule looks its runs up in a lateral subquery that
// OFFSET 0 keeps from being flattened into a join: a join's plan made
// while runs is nearly empty (a generic one, kept by the by-key pool) walks
// all of runs_pkey for each schedule, half a second a batch once the
// table holds 10,000 runs; the subquery's is an index lookup whatever the
// table's size.
const liveScheduledRunsSQL = `SELECT v.p AS project, v.d AS domain, v.n AS schedule_name, r.name
  FROM unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[])) AS v(p, d, n)
 CROSS JOIN LATERAL (SELECT name FROM runs
	WHERE project = v.p AND domain = v.d AND schedule_name = v.n AND ended_at IS NULL OFFSET 0) r
 ORDER BY v.p, v.d, r.name`

// LiveScheduledRuns returns, for each of keys that has any, the names of
// the schedule's runs that have not ended, by name. Outside a transaction
// it runs on the by-key pool.
func (s Schedules) LiveScheduledRuns(ctx context.Context, keys []ScheduleKey) (map[ScheduleKey][]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	p, d, n := keyArrays(keys)
	var rows []struct{ Project, Domain, ScheduleName, Name string }
	if err := s.prefer(poolByKey).raw(ctx, liveScheduledRunsSQL, p, d, n).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := map[ScheduleKey][]string{}
	for _, r := range rows {
		k := ScheduleKey{r.Project, r.Domain, r.ScheduleName}
		out[k] = append(out[k], r.Name)
	}
	return out, nil
}

// ScheduleFiring is what one firing writes of a schedule: its new cursor,
// pending times, buffer and check time, and what it adds to its counters.
type ScheduleFiring struct {
	Key             ScheduleKey
	CursorAt        time.Time
	Pending         []domain.PendingTime
	Buffered        []time.Time
	Missed, Skipped int64
	CheckAt         *time.Time
}

// recordFiringsSQL applies the firings of @rows (a JSON array of
// firingRow) to their schedules in one statement; the counters grow by
// the firings' counts. The firing transaction holds the rows
// (LockDueSchedules).
const recordFiringsSQL = `UPDATE schedules s SET cursor_at = v.cursor_at, pending = v.pending, buffered = v.buffered,
	missed_catchup_window = s.missed_catchup_window + v.missed, skipped_overlap = s.skipped_overlap + v.skipped,
	check_at = v.check_at
  FROM jsonb_to_recordset(CAST(@rows AS jsonb)) AS v(project text, domain text, name text, cursor_at timestamptz,
	pending jsonb, buffered jsonb, missed bigint, skipped bigint, check_at timestamptz)
 WHERE s.project = v.project AND s.domain = v.domain AND s.name = v.name`

// firingRow is one element of recordFiringsSQL's @rows.
type firingRow struct {
	Project  string               `json:"project"`
	Domain   string               `json:"domain"`
	Name     string               `json:"name"`
	CursorAt time.Time            `json:"cursor_at"`
	Pending  []domain.PendingTime `json:"pending"`
	Buffered []time.Time          `json:"buffered"`
	Missed   int64                `json:"missed"`
	Skipped  int64                `json:"skipped"`
	CheckAt  *time.Time           `json:"check_at"`
}

// RecordFirings writes the firings, one statement for them all.
func (s Schedules) RecordFirings(ctx context.Context, firings []ScheduleFiring) error {
	if len(firings) == 0 {
		return nil
	}
	rows := make([]firingRow, len(firings))
	for i, f := range firings {
		rows[i] = firingRow{Project: f.Key.Project, Domain: f.Key.Domain, Name: f.Key.Name, CursorAt: f.CursorAt,
			Pending: f.Pending, Buffered: f.Buffered, Missed: f.Missed, Skipped: f.Skipped, CheckAt: f.CheckAt}
		if rows[i].Pending == nil {
			rows[i].Pending = []domain.PendingTime{}
		}
		if rows[i].Buffered == nil {
			rows[i].Buffered = []time.Time{}
		}
	}
	raw, err := encodeRows(rows)
	if err != nil {
		return fmt.Errorf("schedule firings: %w", err)
	}
	return mapErr(s.exec(ctx, recordFiringsSQL, map[string]any{"rows": string(raw)}).Error)
}

// NextCheckAt returns the earliest check_at of all schedules, through
// schedules_due; false when none has one.
func (s Schedules) NextCheckAt(ctx context.Context) (time.Time, bool, error) {
	var at []time.Time
	err := s.raw(ctx, `SELECT check_at FROM schedules WHERE check_at IS NOT NULL ORDER BY check_at LIMIT 1`).
		Scan(&at).Error
	if err != nil || len(at) == 0 {
		return time.Time{}, false, mapErr(err)
	}
	return at[0].UTC(), true, nil
}

// ScheduledRun is one run a schedule started: its name, scheduled time and
// phase.
type ScheduledRun struct {
	Name        string
	ScheduledAt time.Time
	Phase       string
}

// recentScheduledRunsSQL reads the latest runs (by scheduled time, at most
// the fourth parameter) of each schedule of three arrays (projects,
// domains, names), through runs_by_schedule.
const recentScheduledRunsSQL = `SELECT v.p AS project, v.d AS domain, v.n AS schedule, r.name, r.scheduled_at, r.phase
  FROM unnest(CAST(? AS text[]), CAST(? AS text[]), CAST(? AS text[])) AS v(p, d, n)
 CROSS JOIN LATERAL (SELECT name, scheduled_at, phase FROM runs
	WHERE project = v.p AND domain = v.d AND schedule_name = v.n ORDER BY scheduled_at DESC LIMIT ?) r
 ORDER BY v.p, v.d, v.n, r.scheduled_at DESC`

// RecentScheduledRuns returns, for each of keys that has any, its latest
// runs by scheduled time, newest first, at most n each.
func (s Schedules) RecentScheduledRuns(ctx context.Context, keys []ScheduleKey, n int) (map[ScheduleKey][]ScheduledRun, error) {
	if len(keys) == 0 || n <= 0 {
		return nil, nil
	}
	p, d, names := keyArrays(keys)
	var rows []struct {
		Project, Domain, Schedule, Name string
		ScheduledAt                     time.Time
		Phase                           string
	}
	if err := s.raw(ctx, recentScheduledRunsSQL, p, d, names, n).Scan(&rows).Error; err != nil {
		return nil, mapErr(err)
	}
	out := map[ScheduleKey][]ScheduledRun{}
	for _, r := range rows {
		k := ScheduleKey{r.Project, r.Domain, r.Schedule}
		out[k] = append(out[k], ScheduledRun{Name: r.Name, ScheduledAt: r.ScheduledAt.UTC(), Phase: r.Phase})
	}
	return out, nil
}
