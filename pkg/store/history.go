package store

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The history tables (run_events, attempt_logs, attempt_log_chunks) are
// partitioned by day of created_at in UTC (migration 23): the partition
// <table>_pYYYYMMDD holds [that day 00:00 UTC, the next day 00:00 UTC), and
// <table>_default every row no partition covers, so that an insert never
// fails. A day of history goes with one DROP TABLE, whatever its rows.

// HistoryTables are the tables partitioned by day, in the order History
// maintains them.
var HistoryTables = []string{"run_events", "attempt_logs", "attempt_log_chunks"}

// Partition is one day's partition of a history table.
type Partition struct {
	// Table is the partitioned table, one of HistoryTables.
	Table string
	// Day is the partition's first instant, a midnight UTC; it holds the
	// rows created before Day + 24 h.
	Day time.Time
}

// Name is the partition's table name: <table>_pYYYYMMDD.
func (p Partition) Name() string { return p.Table + "_p" + p.Day.Format("20060102") }

// End is the first instant after the partition's range.
func (p Partition) End() time.Time { return p.Day.Add(24 * time.Hour) }

// String is Name.
func (p Partition) String() string { return p.Name() }

const (
	// partitionLockTimeout bounds how long a partition's DDL waits for a
	// table lock (lock_timeout); meanwhile every statement that asks for a
	// conflicting lock of the same table waits behind it. A DDL that waits
	// longer fails, and a later round makes it.
	partitionLockTimeout = 500 * time.Millisecond
	// partitionSettle is how long after its range ends a partition may
	// still receive rows: a row's created_at is its writer's clock, taken
	// before the transaction commits. DropPartitionsBefore keeps a
	// partition that young, whatever its horizon.
	partitionSettle = time.Hour
	// partitionsLockKey is the advisory lock every partition DDL takes
	// first (pg_advisory_xact_lock(hashtextextended(key, 0))): two
	// replicas' maintenance never run the same DDL at once.
	partitionsLockKey = "capstan:history_partitions"
)

// EnsurePartitions makes the missing partitions of each history table: for
// the UTC days of now through ahead (≥ 0) days after it, and for every day
// some row of its default partition was created in, whose rows it moves
// there. It returns the partitions it made; a partition that exists is
// left as it is, so a second call makes none. Each partition is made in a
// transaction of its own (ensurePartition says what it locks) that fails
// when a lock is not granted within 500 ms; the partitions made until then
// are returned with the error. Call it on a Store outside a transaction.
func (s History) EnsurePartitions(ctx context.Context, now time.Time, ahead int) ([]Partition, error) {
	if ahead < 0 {
		return nil, fmt.Errorf("store: partitions %d days ahead, want 0 or more", ahead)
	}
	today := now.UTC().Truncate(24 * time.Hour)
	var made []Partition
	for _, table := range HistoryTables {
		have, err := s.partitions(ctx, table)
		if err != nil {
			return made, err
		}
		days, err := s.defaultDays(ctx, table)
		if err != nil {
			return made, err
		}
		for i := range ahead + 1 {
			days = append(days, today.AddDate(0, 0, i))
		}
		slices.SortFunc(days, time.Time.Compare)
		for _, day := range slices.Compact(days) {
			p := Partition{Table: table, Day: day}
			if slices.ContainsFunc(have, func(h Partition) bool { return h.Day.Equal(day) }) {
				continue
			}
			ok, err := s.ensurePartition(ctx, p)
			if err != nil {
				return made, fmt.Errorf("make partition %s: %w", p, err)
			}
			if ok {
				made = append(made, p)
			}
		}
	}
	return made, nil
}

// DropPartitionsBefore drops each history table's partitions whose range
// ends at or before t, but none that ended less than an hour ago (a
// writer's created_at may still fall in it), nor a default partition. It
// returns the partitions it dropped, table by table, oldest first. Each
// drop is a transaction of its own (dropPartition says what it locks)
// that fails when a lock is not granted within 500 ms; the partitions
// dropped until then are returned with the error. Call it on a Store
// outside a transaction.
func (s History) DropPartitionsBefore(ctx context.Context, t time.Time) ([]Partition, error) {
	t = minTime(t, time.Now().Add(-partitionSettle))
	var dropped []Partition
	for _, table := range HistoryTables {
		have, err := s.partitions(ctx, table)
		if err != nil {
			return dropped, err
		}
		for _, p := range have {
			if p.End().After(t) {
				break
			}
			if err := s.dropPartition(ctx, p); err != nil {
				return dropped, fmt.Errorf("drop partition %s: %w", p, err)
			}
			dropped = append(dropped, p)
		}
	}
	return dropped, nil
}

// Partitions returns the day partitions of table (one of HistoryTables),
// oldest first; the default partition is not one of them.
func (s History) Partitions(ctx context.Context, table string) ([]Partition, error) {
	if !slices.Contains(HistoryTables, table) {
		return nil, fmt.Errorf("store: %q is not a history table", table)
	}
	return s.partitions(ctx, table)
}

// partitionsSQL lists the partitions of @parent by name; it reads only the
// catalog.
const partitionsSQL = `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = CAST(CAST(@parent AS text) AS regclass) ORDER BY c.relname`

// partitions returns table's day partitions, oldest first: its partitions
// named <table>_pYYYYMMDD.
func (s *core) partitions(ctx context.Context, table string) ([]Partition, error) {
	var names []string
	if err := s.raw(ctx, partitionsSQL, map[string]any{"parent": table}).Scan(&names).Error; err != nil {
		return nil, mapErr(err)
	}
	var out []Partition
	for _, n := range names {
		digits, ok := strings.CutPrefix(n, table+"_p")
		if !ok || len(digits) != len("20060102") {
			continue
		}
		day, err := time.Parse("20060102", digits)
		if err != nil {
			continue
		}
		out = append(out, Partition{Table: table, Day: day})
	}
	return out, nil
}

// defaultDays returns the UTC days the rows of table's default partition
// were created in, oldest first, one index probe (<table>_default_created)
// a day.
func (s *core) defaultDays(ctx context.Context, table string) ([]time.Time, error) {
	q := `SELECT min(created_at) FROM ` + pgx.Identifier{table + "_default"}.Sanitize() + ` WHERE created_at >= @from`
	var days []time.Time
	from := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	for {
		var first sql.NullTime
		if err := scanRow(s.raw(ctx, q, map[string]any{"from": from}), &first); err != nil {
			return nil, mapErr(err)
		}
		if !first.Valid {
			return days, nil
		}
		day := first.Time.UTC().Truncate(24 * time.Hour)
		days = append(days, day)
		from = day.Add(24 * time.Hour)
	}
}

// ensurePartition makes p in one transaction, unless it exists (made is
// then false): it creates p's table apart, moves into it the rows of the
// default partition in p's range, if any, and attaches it. ATTACH holds
// the parent table's SHARE UPDATE EXCLUSIVE lock (inserts into the other
// partitions and reads go on) and the default partition's ACCESS EXCLUSIVE
// lock while it checks that no row left there belongs to p (a scan of the
// default partition, kept empty but for the days no partition covers):
// reads of the table wait that long. When there are rows to move, it holds
// the parent's SHARE lock from before the move to the commit: the table's
// writers wait (the move is one statement, then an index build on the rows
// moved), so that none adds a row of p's range to the default partition
// meanwhile, nor routes one there after the commit (which would fail: the
// default partition's constraint changed). The rows moved are checked
// against p's range by a CHECK constraint rather than a scan. CREATE
// TABLE ... PARTITION OF would hold the parent's ACCESS EXCLUSIVE lock,
// stopping inserts and reads.
func (s History) ensurePartition(ctx context.Context, p Partition) (made bool, err error) {
	name, def := pgx.Identifier{p.Name()}.Sanitize(), pgx.Identifier{p.Table + "_default"}.Sanitize()
	parent := pgx.Identifier{p.Table}.Sanitize()
	from, to := p.Day.Format(time.RFC3339), p.End().Format(time.RFC3339)
	inRange := fmt.Sprintf(`created_at >= '%s' AND created_at < '%s'`, from, to)
	err = s.inTx(ctx, func(tx *Store) error {
		if err := tx.lockPartitions(ctx); err != nil {
			return err
		}
		var exists, moving bool
		if err := scanRow(tx.raw(ctx, `SELECT to_regclass(CAST(@name AS text)) IS NOT NULL`,
			map[string]any{"name": p.Name()}), &exists); err != nil || exists {
			return mapErr(err)
		}
		if err := scanRow(tx.q(ctx).Raw(`SELECT EXISTS (SELECT 1 FROM `+def+` WHERE `+inRange+`)`), &moving); err != nil {
			return mapErr(err)
		}
		bound := pgx.Identifier{p.Name() + "_bound"}.Sanitize()
		var ddl []string
		if moving {
			ddl = append(ddl, `LOCK TABLE `+parent+` IN SHARE MODE`)
		}
		ddl = append(ddl, `CREATE TABLE `+name+` (LIKE `+parent+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`)
		if moving {
			ddl = append(ddl, `WITH moved AS (DELETE FROM `+def+` WHERE `+inRange+` RETURNING *)
				INSERT INTO `+name+` SELECT * FROM moved`,
				`ALTER TABLE `+name+` ADD CONSTRAINT `+bound+` CHECK (`+inRange+`)`)
		}
		ddl = append(ddl, `ALTER TABLE `+parent+` ATTACH PARTITION `+name+` FOR VALUES FROM ('`+from+`') TO ('`+to+`')`)
		if moving {
			ddl = append(ddl, `ALTER TABLE `+name+` DROP CONSTRAINT `+bound)
		}
		made = true
		return tx.ddl(ctx, ddl...)
	})
	return made && err == nil, err
}

// dropPartition drops p's table in one transaction. DROP TABLE of a
// partition holds the parent table's ACCESS EXCLUSIVE lock, and the
// default partition's, to its commit: the table's inserts and reads wait
// for it, a catalog change and the unlink of the partition's files, some
// milliseconds whatever its rows (7 ms for 200,000 events on a 2-core
// machine, where their DELETE took 230 ms). DETACH PARTITION (without
// CONCURRENTLY) takes the same locks; DETACH ... CONCURRENTLY, which would
// let inserts go on, is refused on a table with a default partition.
func (s History) dropPartition(ctx context.Context, p Partition) error {
	return s.inTx(ctx, func(tx *Store) error {
		if err := tx.lockPartitions(ctx); err != nil {
			return err
		}
		return tx.ddl(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{p.Name()}.Sanitize())
	})
}

// lockPartitions sets the transaction's lock_timeout (partitionLockTimeout)
// and takes the partitions' advisory lock (partitionsLockKey).
func (s *core) lockPartitions(ctx context.Context) error {
	ms := partitionLockTimeout.Milliseconds()
	if err := s.q(ctx).Exec(fmt.Sprintf(`SET LOCAL lock_timeout = %d`, ms)).Error; err != nil {
		return mapErr(err)
	}
	return mapErr(s.exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(CAST(@key AS text), 0))`,
		map[string]any{"key": partitionsLockKey}).Error)
}

// ddl runs statements one after another, each text as it is: they name
// their tables and bounds in the text, so raw's binding (which keeps every
// text it binds) is not for them.
func (s *core) ddl(ctx context.Context, statements ...string) error {
	for _, st := range statements {
		if err := s.q(ctx).Exec(st).Error; err != nil {
			return mapErr(err)
		}
	}
	return nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// OldestRun returns the creation time of the oldest run there is, and
// false when there is none. Every row of the history tables belongs to a
// run and is written at or after its run's creation, so no history before
// it belongs to a run that exists. It reads the whole runs table (a
// sequential scan: for a periodic caller, not a hot path).
func (s History) OldestRun(ctx context.Context) (time.Time, bool, error) {
	var oldest []time.Time
	if err := s.raw(ctx, `SELECT min(created_at) FROM runs HAVING count(*) > 0`).Scan(&oldest).Error; err != nil {
		return time.Time{}, false, mapErr(err)
	}
	if len(oldest) == 0 {
		return time.Time{}, false, nil
	}
	return oldest[0], true, nil
}
