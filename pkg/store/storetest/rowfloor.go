package storetest

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// RowFloorScript is the pgbench script of the row floor of a single-task
// run (rowfloor.sql): the inserts and updates a single-step noop run makes
// when nothing waits, for :k runs (at most 100) in one transaction.
//
//go:embed rowfloor.sql
var RowFloorScript string

// RunRowFloor runs RowFloorScript once on conn for k runs (1-100), as
// pgbench would, and returns the first run's name; the others are named
// after it in sequence. Errors: Postgres's, or a k out of range.
func RunRowFloor(ctx context.Context, conn *sql.Conn, k int) (string, error) {
	if k < 1 || k > 100 {
		return "", fmt.Errorf("storetest: row floor of %d runs, want 1-100", k)
	}
	var lines []string
	for l := range strings.SplitSeq(RowFloorScript, "\n") {
		if !strings.HasPrefix(l, "--") && strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	first, rest := lines[0], strings.Join(lines[1:], "\n")
	var b int64
	if err := conn.QueryRowContext(ctx, strings.TrimSuffix(first, ` AS b \gset`)).Scan(&b); err != nil {
		return "", err
	}
	rest = strings.NewReplacer(":b", strconv.FormatInt(b, 10), ":k", strconv.Itoa(k)).Replace(rest)
	for stmt := range strings.SplitSeq(rest, ";\n") {
		if stmt = strings.TrimSuffix(strings.TrimSpace(stmt), ";"); stmt == "" {
			continue
		}
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			return "", fmt.Errorf("storetest: row floor: %w in %.60q", err, stmt)
		}
	}
	return "f" + strconv.FormatInt(b, 10), nil
}
