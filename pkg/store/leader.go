package store

import (
	"context"
	"database/sql"
)

// Leadership is a held Postgres session advisory lock: the holder is the one
// leader among replicas. It ends when Release is called or its connection
// dies (check with Held).
type Leadership struct {
	conn *sql.Conn
	id   int64
}

// TryLeadership tries to take advisory lock id on a dedicated connection.
// It returns nil, nil when another session holds it.
func (s *Store) TryLeadership(ctx context.Context, id int64) (*Leadership, error) {
	db, err := s.db.DB()
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var ok bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1)`, id).Scan(&ok); err != nil || !ok {
		conn.Close()
		return nil, err
	}
	return &Leadership{conn: conn, id: id}, nil
}

// Held reports whether the lock's session is still alive.
func (l *Leadership) Held(ctx context.Context) bool {
	return l.conn.PingContext(ctx) == nil
}

// Release unlocks and returns the connection.
func (l *Leadership) Release() {
	_, _ = l.conn.ExecContext(context.Background(), `SELECT pg_advisory_unlock($1)`, l.id)
	l.conn.Close()
}
