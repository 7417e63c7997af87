package e2e

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/stretchr/testify/require"
)

// floodWorkers is how many requests a flood has in flight at most.
const floodWorkers = 64

// tokenStatements counts the statements Postgres ran reading api_tokens by
// a secret's hash (store.Tokens.TokenByHash), from pg_stat_statements.
func tokenStatements(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(`SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE query LIKE 'SELECT %"api_tokens"%WHERE hash = $1%'`).Scan(&n))
	return n
}

// floodResult is what a flood's answers were.
type floodResult struct {
	sent     int
	byStatus map[int]int
	// unauthorized are the secrets answered 401 at least once: those that
	// reached authentication.
	unauthorized map[string]bool
	// bad describes the first answer that broke the contract, if any.
	bad string
}

// flood sends GET .../runs with secrets[i % len] at rate requests a
// second for d, from floodWorkers connections; it returns what came back.
func flood(t *testing.T, url string, secrets []string, rate int, d time.Duration) floodResult {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = floodWorkers, floodWorkers
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res := floodResult{byStatus: map[int]int{}, unauthorized: map[string]bool{}}
	var mu sync.Mutex
	jobs := make(chan string, floodWorkers)
	var wg sync.WaitGroup
	for range floodWorkers {
		wg.Go(func() {
			for secret := range jobs {
				status, why := floodOne(client, url, secret)
				mu.Lock()
				res.byStatus[status]++
				if status == http.StatusUnauthorized {
					res.unauthorized[secret] = true
				}
				if why != "" && res.bad == "" {
					res.bad = why
				}
				mu.Unlock()
			}
		})
	}
	// Each tick sends what is due since start; when the workers lag, the
	// sends wait for them and the rate falls short (logged).
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for now := start; now.Sub(start) < d; now = <-tick.C {
		for due := int(now.Sub(start).Seconds() * float64(rate)); res.sent < due && time.Since(start) < d; res.sent++ {
			jobs <- secrets[res.sent%len(secrets)]
		}
	}
	close(jobs)
	wg.Wait()
	took := time.Since(start)
	t.Logf("flood: %d requests in %s (%.0f/s, asked %d/s for %s): %v; %d secrets reached authentication",
		res.sent, took.Round(time.Millisecond), float64(res.sent)/took.Seconds(), rate, d, res.byStatus,
		len(res.unauthorized))
	return res
}

// floodOne sends one request with secret and returns its status, and why
// the answer breaks the contract (401 or 429 problem+json, a 429 with
// Retry-After), "" when it keeps it.
func floodOne(client *http.Client, url, secret string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch {
	case resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusTooManyRequests:
		return resp.StatusCode, "status " + resp.Status
	case resp.Header.Get("Content-Type") != "application/problem+json":
		return resp.StatusCode, "content type " + resp.Header.Get("Content-Type")
	case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "":
		return resp.StatusCode, "a 429 without Retry-After"
	}
	return resp.StatusCode, ""
}

// TestRandomTokenFlood: one client sends random bearer secrets
// (CAPSTAN_E2E_FLOOD_SECRETS of them, default 100, in turn: each is sent
// many times, so that the api's memory of unknown ones shows) to a real
// api at CAPSTAN_E2E_FLOOD_RATE requests a second (default 5,000) for
// CAPSTAN_E2E_FLOOD_FOR (default 3s; the full figure, 10s, by hand). Every answer is 401 or 429 problem+json; Postgres,
// a private server with pg_stat_statements, ran one token statement per
// secret that reached authentication, the api's memory of unknown secrets
// outlasting the flood (one cache period), however often each was sent —
// as capstan_api_token_lookups_total counts too. The admin token, which
// the api knows, still passes at once.
func TestRandomTokenFlood(t *testing.T) {
	rate := envInt("CAPSTAN_E2E_FLOOD_RATE", 5000)
	d := envDuration("CAPSTAN_E2E_FLOOD_FOR", 3*time.Second)
	n := envInt("CAPSTAN_E2E_FLOOD_SECRETS", 100)
	pg := StartPostgres(t, "shared_preload_libraries=pg_stat_statements")
	db, err := sql.Open("pgx", pg.URL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	_, err = db.Exec(`CREATE EXTENSION pg_stat_statements`)
	require.NoError(t, err)
	// An address's bucket small enough that a slowed flood still empties
	// it; cache periods longer than the flood.
	s := Start(t, bins, Options{Executors: 1, DatabaseURL: pg.URL, Env: []string{
		"CAPSTAN_API_IP_RATE_LIMIT=200", "CAPSTAN_API_IP_RATE_BURST=200",
		"CAPSTAN_API_UNKNOWN_TOKEN_TTL=10m", "CAPSTAN_API_TOKEN_CACHE_TTL=10m"}})
	secrets := make([]string, n)
	for i := range secrets {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		secrets[i] = "cap_" + hex.EncodeToString(b)
	}
	metricsBefore := metricsOf(t, s.APIURL, s.Token)
	_, err = db.Exec(`SELECT pg_stat_statements_reset()`)
	require.NoError(t, err)

	res := flood(t, s.APIURL+"/v1/projects/"+project+"/domains/"+domain+"/runs", secrets, rate, d)
	status, body := scrape(t, s.APIURL+"/v1/projects/"+project+"/domains/"+domain+"/runs", s.Token)
	require.Equal(t, http.StatusOK, status, "a known token passes while its address's bucket is empty: %s", body)

	require.Empty(t, res.bad, "an answer broke the contract")
	require.Equal(t, res.sent, res.byStatus[http.StatusUnauthorized]+res.byStatus[http.StatusTooManyRequests])
	statements := tokenStatements(t, db)
	lookups := metricsOf(t, s.APIURL, s.Token)
	unknown := lookups[`capstan_api_token_lookups_total{result="unknown"}`] -
		metricsBefore[`capstan_api_token_lookups_total{result="unknown"}`]
	found := lookups[`capstan_api_token_lookups_total{result="found"}`] -
		metricsBefore[`capstan_api_token_lookups_total{result="found"}`]
	t.Logf("token statements: %d by pg_stat_statements; by the api's counter %.0f unknown and %.0f found, "+
		"for %d secrets answered 401 %d times", statements, unknown, found, len(res.unauthorized),
		res.byStatus[http.StatusUnauthorized])
	require.Equal(t, float64(len(res.unauthorized)), unknown, "one lookup per secret that reached authentication")
	// The executor's token may be looked up once more (the one token this
	// stack has besides the bootstrap ones, which cost no statement).
	require.LessOrEqual(t, statements, int64(len(res.unauthorized))+1, "at most one statement per secret")
	require.LessOrEqual(t, statements, int64(n)+1)
	require.Positive(t, res.byStatus[http.StatusTooManyRequests], "the address's bucket ran dry")
	require.Positive(t, res.byStatus[http.StatusUnauthorized])
}

// openEvents opens a stream (GET url) with token; it returns the status,
// the Retry-After, and close, which ends the stream.
func openEvents(t *testing.T, url, token string) (int, string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode == http.StatusOK {
		require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	} else {
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), func() { cancel(); resp.Body.Close() }
}

// TestEventStreamsCapped: with CAPSTAN_API_MAX_STREAMS_PER_TOKEN=2 and
// CAPSTAN_API_MAX_STREAMS=3 on a real api, a token holding a project's
// event stream and an attempt's logs?follow=true gets 429 with
// Retry-After for a third stream (a run's events); another token gets the
// process's last slot, a third token 429; once a stream ends its slot
// serves the next.
func TestEventStreamsCapped(t *testing.T) {
	t.Parallel()
	s := Start(t, bins, Options{Executors: 1, Env: []string{"CAPSTAN_API_MAX_STREAMS_PER_TOKEN=2",
		"CAPSTAN_API_MAX_STREAMS=3"}})
	ctx := context.Background()
	name := create(t, s, api.WorkflowSpec{Steps: []api.Step{{Name: "wait", Command: ptr("sleep 60")}}})
	s.Eventually(20*time.Second, "attempt 1 exists", func() bool {
		a := action(getRun(t, s, name), "wait")
		return len(a.Tasks) == 1 && len(a.Tasks[0].Attempts) == 1
	})
	base := s.APIURL + "/v1/projects/" + project + "/domains/" + domain
	projectEvents, runEvents := base+"/events", base+"/runs/"+name+"/events"
	follow := base + "/runs/" + name + "/actions/wait/tasks/0/attempts/1/logs?follow=true"
	token := func(name string, role api.Role) string {
		resp, err := s.Client.CreateTokenWithResponse(ctx, api.CreateTokenRequest{Name: name, Role: role})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON201, "%s", resp.Body)
		return *resp.JSON201.Token
	}
	reader, writer := token("reader", api.RoleReader), token("writer", api.RoleWriter)

	status, _, _ := openEvents(t, projectEvents, s.Token)
	require.Equal(t, http.StatusOK, status)
	status, _, closeFollow := openEvents(t, follow, s.Token)
	require.Equal(t, http.StatusOK, status)
	status, retry, _ := openEvents(t, runEvents, s.Token)
	require.Equal(t, http.StatusTooManyRequests, status, "the token's third stream")
	require.NotEmpty(t, retry)
	status, _, _ = openEvents(t, runEvents, reader)
	require.Equal(t, http.StatusOK, status, "another token, the process's third stream")
	status, retry, _ = openEvents(t, projectEvents, writer)
	require.Equal(t, http.StatusTooManyRequests, status, "the process's fourth stream")
	require.NotEmpty(t, retry)

	closeFollow()
	s.Eventually(10*time.Second, "the ended stream's slot serves the next", func() bool {
		status, _, closeIt := openEvents(t, projectEvents, writer)
		if status != http.StatusOK {
			closeIt()
		}
		return status == http.StatusOK
	})
}
