package backing

import (
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
