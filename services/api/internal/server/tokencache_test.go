package server

import (
	"context"
	"crypto/sha256"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/capstan-run/capstan/pkg/store/storetest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// newTestAuthenticator is an authenticator on st with cfg's defaults, and
// its TokenByHash counter.
func newTestAuthenticator(st *store.Store, cfg Config) (*authenticator, *prometheus.CounterVec) {
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lookups"}, []string{"result"})
	return newAuthenticator(st, cfg.withDefaults(), lookups), lookups
}

// bearer is a request carrying secret.
func bearer(secret string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "/v1/workers", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	return req
}

// authenticateAll authenticates secret from n goroutines at once and
// returns their errors.
func authenticateAll(a *authenticator, secret string, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = a.authenticate(bearer(secret))
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// TestTokenLookupsAreOnePerSecret: many requests at once with one unknown
// secret, then again, cost one statement; each other secret one more; a
// token's row likewise; an unknown secret is asked again only after
// UnknownTokenTTL.
func TestTokenLookupsAreOnePerSecret(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	a, lookups := newTestAuthenticator(st, Config{UnknownTokenTTL: time.Hour})
	for range 2 {
		for _, err := range authenticateAll(a, "cap_random-guess", 50) {
			require.ErrorIs(t, err, errBadToken)
		}
	}
	require.Equal(t, 1.0, testutil.ToFloat64(lookups.WithLabelValues("unknown")), "one statement for one secret")
	for _, s := range []string{"cap_other-1", "cap_other-2"} {
		authenticateAll(a, s, 10)
	}
	require.Equal(t, 3.0, testutil.ToFloat64(lookups.WithLabelValues("unknown")))

	_, secret, err := st.Tokens().CreateToken(context.Background(), store.NewToken{Name: "r", Role: RoleReader})
	require.NoError(t, err)
	for range 2 {
		for _, err := range authenticateAll(a, secret, 50) {
			require.NoError(t, err)
		}
	}
	require.Equal(t, 1.0, testutil.ToFloat64(lookups.WithLabelValues("found")))

	short, lookups := newTestAuthenticator(st, Config{UnknownTokenTTL: 20 * time.Millisecond})
	_, err = short.authenticate(bearer("cap_random-guess"))
	require.ErrorIs(t, err, errBadToken)
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(lookups.WithLabelValues("unknown")) < 2 {
		require.True(t, time.Now().Before(deadline), "the secret was never asked again")
		_, err = short.authenticate(bearer("cap_random-guess"))
		require.ErrorIs(t, err, errBadToken)
	}
}

// TestRevocationElsewhereWithinTheCacheTTL: a token revoked in the database
// (by another api replica) still passes here while its row is remembered,
// and is refused within TokenCacheTTL; one revoked through this replica is
// refused at once.
func TestRevocationElsewhereWithinTheCacheTTL(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := context.Background()
	ttl := time.Second
	a, _ := newTestAuthenticator(st, Config{TokenCacheTTL: ttl})
	tok, secret, err := st.Tokens().CreateToken(ctx, store.NewToken{Name: "r", Role: RoleReader})
	require.NoError(t, err)
	_, err = a.principal(ctx, sha256.Sum256([]byte(secret)))
	require.NoError(t, err)
	revoked := time.Now()
	_, err = st.Tokens().RevokeToken(ctx, tok.ID)
	require.NoError(t, err)
	_, err = a.principal(ctx, sha256.Sum256([]byte(secret)))
	require.NoError(t, err, "remembered: the revocation was elsewhere")
	for { // polls TokenByHash once a TTL at most
		_, err = a.principal(ctx, sha256.Sum256([]byte(secret)))
		if err != nil {
			break
		}
		require.Less(t, time.Since(revoked), 5*time.Second, "still accepted long past the TTL")
	}
	require.ErrorIs(t, err, errBadToken)
	require.Less(t, time.Since(revoked), ttl+time.Second, "refused within the TTL (and a statement)")

	tok, secret, err = st.Tokens().CreateToken(ctx, store.NewToken{Name: "r2", Role: RoleReader})
	require.NoError(t, err)
	_, err = a.principal(ctx, sha256.Sum256([]byte(secret)))
	require.NoError(t, err)
	_, err = st.Tokens().RevokeToken(ctx, tok.ID)
	require.NoError(t, err)
	a.forgetTokens()
	_, err = a.principal(ctx, sha256.Sum256([]byte(secret)))
	require.ErrorIs(t, err, errBadToken, "forgotten at once")
}
