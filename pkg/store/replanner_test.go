package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// replanner keeps at most maxTrackedConns connections: it is never told
// of a closed one, and may not ask another goroutine's connection.
func TestReplannerForgetsConnectionsPastItsBound(t *testing.T) {
	t.Parallel()
	r := newReplanner(time.Now)
	for range 3 * maxTrackedConns {
		require.NoError(t, r.resetSession(context.Background(), &pgx.Conn{})) // one use: none due
		require.LessOrEqual(t, len(r.conns), maxTrackedConns)
	}
}
