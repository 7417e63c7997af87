package backing

import (
	"database/sql"

	"github.com/capstan-run/capstan/pkg/store"
	_ "github.com/jackc/pgx/v5/stdlib"
	"testing"

	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/capstan-run/capstan/pkg/svc"
	"github.com/stretchr/testify/require"
)

// redisAddr is the Redis scripts/dev-deps.sh starts.
const redisAddr = "127.0.0.1:56379"

func TestOpenReadyClose(t *testing.T) {
	t.Parallel()
	d, err := Open(t.Context(), svc.Common{DatabaseURL: storetest.NewURL(t), RedisAddr: redisAddr})
	require.NoError(t, err)
	require.NoError(t, d.Ready(t.Context()))
	require.NotNil(t, d.Inspector)
	require.NotNil(t, d.Registry)
	require.NoError(t, d.Close())
}

func TestReadyNamesWhatIsDown(t *testing.T) {
	t.Parallel()
	d, err := Open(t.Context(), svc.Common{DatabaseURL: storetest.NewURL(t), RedisAddr: "127.0.0.1:1"})
	require.NoError(t, err, "Redis is not dialled at Open")
	t.Cleanup(func() { _ = d.Close() })
	err = d.Ready(t.Context())
	require.ErrorContains(t, err, "redis: ")
	require.NotContains(t, err.Error(), "postgres: ")
}

func TestOpenFailsWithoutPostgres(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), svc.Common{DatabaseURL: "postgres://capstan@127.0.0.1:1/capstan?sslmode=disable",
		RedisAddr: redisAddr})
	require.Error(t, err)
}

func TestReadyWantsMigrationsAtHead(t *testing.T) {
	t.Parallel()
	u := storetest.NewURL(t)
	d, err := Open(t.Context(), svc.Common{DatabaseURL: u, RedisAddr: redisAddr})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	db, err := sql.Open("pgx", u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(t.Context(), `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`)
	require.NoError(t, err)
	require.ErrorIs(t, d.Ready(t.Context()), store.ErrMigrationsPending)
}
