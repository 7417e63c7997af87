package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/getkin/kin-openapi/openapi3filter"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
)

// Roles of API tokens. Admin may do everything; a writer what a reader may
// and change runs; a worker only what executors call.
const (
	RoleAdmin  = "admin"
	RoleWriter = "writer"
	RoleReader = "reader"
	RoleWorker = "worker"
)

// RoleAny is the x-capstan-role of an operation every valid token may
// call, whatever its role (the server's version). No token has it.
const RoleAny = "any"

// principal is who a request's bearer token speaks for.
type principal struct {
	// tokenID is the api_tokens id ("admin" or "worker" for the bootstrap
	// tokens of the environment); it keys the rate limit.
	tokenID string
	// name is the token's name ("admin" or "worker" for the bootstrap
	// tokens): who an approval without `by` is recorded as.
	name string
	role string
	// projects scopes the token; empty: every project.
	projects []string
	// workerID is the worker a registration-minted token speaks for.
	workerID string
	// attempt is the attempt (with its task and action) the holder check
	// of an "attempt" route read from Postgres, for the handler to reuse;
	// nil when the check read nothing (an admin, or a holder it knew).
	attempt *store.AttemptRun
}

// mayReach reports whether p may see objects of project.
func (p principal) mayReach(project string) bool {
	return len(p.projects) == 0 || slices.Contains(p.projects, project)
}

type principalKey struct{}

// principalFrom returns the principal the auth hook stored in ctx.
func principalFrom(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// hasRole reports whether a token of role have may call an operation that
// needs role need.
func hasRole(have, need string) bool {
	switch {
	case have == RoleAdmin || need == RoleAny:
		return true
	case need == RoleReader:
		return have == RoleWriter || have == RoleReader
	default:
		return have == need
	}
}

// authenticator turns a bearer secret into a principal: one of the
// bootstrap tokens of the environment (compared in constant time) or a row
// of api_tokens, neither revoked nor expired.
type authenticator struct {
	store *store.Store
	// admin and worker are the SHA-256 of the bootstrap secrets (nil: none).
	admin, worker []byte
	now           func() time.Time
	// tokens remembers TokenByHash's rows for Config.TokenCacheTTL, so
	// that an executor's every report does not cost a statement. A
	// revocation through this api forgets them at once (forgetTokens); on
	// another api replica it takes effect within the TTL. Expiry is
	// checked on every request.
	tokens *expirable.LRU[[sha256.Size]byte, store.Token]
	// unknown remembers the hashes TokenByHash found no row for, for
	// Config.UnknownTokenTTL: a client repeating a wrong secret costs no
	// statement. Secrets are made by the api at random, so a hash that was
	// unknown does not become a token meanwhile.
	unknown *expirable.LRU[[sha256.Size]byte, struct{}]
	// lookups makes concurrent lookups of one hash share one statement.
	lookups singleflight.Group
	// mu guards forgotten, the count of forgetTokens calls, and orders
	// them with the adds to tokens: a lookup that began before a call does
	// not remember its row.
	mu        sync.Mutex
	forgotten uint64
	// lookupsTotal counts TokenByHash statements by result.
	lookupsTotal *prometheus.CounterVec
	// limits is the per-token request limit, by token id.
	limits *buckets
	// holders remembers the worker of an attempt, which never changes once
	// the attempt is placed.
	holders *lru.Cache[int64, string]
}

// Bounds of the authenticator's caches.
const (
	tokenCacheSize   = 10_000
	unknownCacheSize = 100_000
	holderCacheLen   = 100_000
	// tokenLookupTimeout bounds one TokenByHash statement, which runs
	// apart from the requests waiting for it.
	tokenLookupTimeout = 10 * time.Second
)

// newAuthenticator reads cfg's bootstrap secrets, cache TTLs and per-token
// rate limit; lookups counts its TokenByHash statements by result (found,
// unknown, error).
func newAuthenticator(st *store.Store, cfg Config, lookups *prometheus.CounterVec) *authenticator {
	holders, _ := lru.New[int64, string](holderCacheLen) // only a non-positive size fails
	a := &authenticator{store: st, now: time.Now, holders: holders, lookupsTotal: lookups,
		limits:  newBuckets(cfg.RateLimit, cfg.RateBurst),
		tokens:  expirable.NewLRU[[sha256.Size]byte, store.Token](tokenCacheSize, nil, cfg.TokenCacheTTL),
		unknown: expirable.NewLRU[[sha256.Size]byte, struct{}](unknownCacheSize, nil, cfg.UnknownTokenTTL)}
	if cfg.AdminToken != "" {
		a.admin = store.HashToken(cfg.AdminToken)
	}
	if cfg.WorkerToken != "" {
		a.worker = store.HashToken(cfg.WorkerToken)
	}
	return a
}

// Errors of authentication, answered by authProblem.
var (
	errNoToken   = errors.New("a bearer token is required (Authorization: Bearer <token>)")
	errBadToken  = errors.New("the token is unknown, revoked or expired")
	errForbidden = errors.New("the token's role does not allow this operation")
)

// forgetTokens drops every remembered token (after a revocation), and
// what lookups under way would remember.
func (a *authenticator) forgetTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forgotten++
	a.tokens.Purge()
}

// authenticate reads the Authorization header of req and charges one
// request to the token's bucket (rateLimitError when it is empty).
func (a *authenticator) authenticate(req *http.Request) (principal, error) {
	hash, ok := bearerHash(req)
	if !ok {
		return principal{}, errNoToken
	}
	p, err := a.principal(req.Context(), hash)
	if err != nil {
		return principal{}, err
	}
	if ok, wait := a.limits.take(p.tokenID); !ok {
		return principal{}, &rateLimitError{wait: wait, detail: "too many requests for this token"}
	}
	return p, nil
}

// bearerHash is the SHA-256 of req's bearer secret; false without one.
func bearerHash(req *http.Request) ([sha256.Size]byte, bool) {
	scheme, secret, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256([]byte(secret)), true
}

// principal is who the secret of hash speaks for: a bootstrap token, or a
// row of api_tokens neither revoked nor expired (errBadToken otherwise).
func (a *authenticator) principal(ctx context.Context, hash [sha256.Size]byte) (principal, error) {
	if p, ok := a.bootstrap(hash); ok {
		return p, nil
	}
	t, err := a.lookup(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return principal{}, errBadToken
	}
	if err != nil {
		return principal{}, fmt.Errorf("look up bearer token: %w", err)
	}
	if !a.valid(t) {
		return principal{}, errBadToken
	}
	p := principal{tokenID: t.ID, name: t.Name, role: t.Role, projects: t.Projects}
	if t.WorkerID != nil {
		p.workerID = *t.WorkerID
	}
	return p, nil
}

// bootstrap returns the principal of a bootstrap secret's hash, compared
// in constant time.
func (a *authenticator) bootstrap(hash [sha256.Size]byte) (principal, bool) {
	if a.admin != nil && subtle.ConstantTimeCompare(hash[:], a.admin) == 1 {
		return principal{tokenID: "admin", name: "admin", role: RoleAdmin}, true
	}
	if a.worker != nil && subtle.ConstantTimeCompare(hash[:], a.worker) == 1 {
		return principal{tokenID: "worker", name: "worker", role: RoleWorker}, true
	}
	return principal{}, false
}

// valid reports whether t is neither revoked nor expired.
func (a *authenticator) valid(t store.Token) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || a.now().Before(*t.ExpiresAt))
}

// known reports whether req carries a token the api holds in memory, a
// bootstrap one or a valid row it remembers, which it authenticates
// without a statement; it looks nothing up.
func (a *authenticator) known(req *http.Request) bool {
	hash, ok := bearerHash(req)
	if !ok {
		return false
	}
	if _, ok := a.bootstrap(hash); ok {
		return true
	}
	t, ok := a.tokens.Peek(hash)
	return ok && a.valid(t)
}

// lookup returns the api_tokens row of hash (revoked and expired ones
// too): from the caches, else from one TokenByHash statement that
// concurrent lookups of the same hash share and whose answer, a row or
// store.ErrNotFound, the caches then keep. So Postgres sees at most one
// statement per hash per Config.TokenCacheTTL (a token) or UnknownTokenTTL
// (an unknown secret), while the hash stays in its bounded cache. Errors:
// store.ErrNotFound, the statement's, or ctx's while it waits.
func (a *authenticator) lookup(ctx context.Context, hash [sha256.Size]byte) (store.Token, error) {
	if t, ok := a.tokens.Get(hash); ok {
		return t, nil
	}
	if a.unknown.Contains(hash) {
		return store.Token{}, store.ErrNotFound
	}
	ch := a.lookups.DoChan(string(hash[:]), func() (any, error) {
		return a.lookupOnce(context.WithoutCancel(ctx), hash)
	})
	select {
	case r := <-ch:
		t, _ := r.Val.(store.Token)
		return t, r.Err
	case <-ctx.Done():
		return store.Token{}, ctx.Err()
	}
}

// lookupOnce reads hash's row with TokenByHash, unless a lookup that ended
// after lookup's checks left it in a cache, and remembers the answer.
func (a *authenticator) lookupOnce(ctx context.Context, hash [sha256.Size]byte) (store.Token, error) {
	if t, ok := a.tokens.Get(hash); ok {
		return t, nil
	}
	if a.unknown.Contains(hash) {
		return store.Token{}, store.ErrNotFound
	}
	a.mu.Lock()
	forgotten := a.forgotten
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, tokenLookupTimeout)
	defer cancel()
	t, err := a.store.Tokens().TokenByHash(ctx, hash[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.lookupsTotal.WithLabelValues("unknown").Inc()
		a.unknown.Add(hash, struct{}{})
	case err != nil:
		a.lookupsTotal.WithLabelValues("error").Inc()
	default:
		a.lookupsTotal.WithLabelValues("found").Inc()
		a.mu.Lock()
		if a.forgotten == forgotten {
			a.tokens.Add(hash, t)
		}
		a.mu.Unlock()
	}
	return t, err
}

// operationRole is the role an operation of the spec needs: its
// x-capstan-role, else reader for a GET and writer otherwise.
func operationRole(method string, ext map[string]any) string {
	if r, ok := ext["x-capstan-role"].(string); ok {
		return r
	}
	if method == http.MethodGet || method == http.MethodHead {
		return RoleReader
	}
	return RoleWriter
}

// authorize is the validator's openapi3filter.AuthenticationFunc for the
// bearer scheme: it authenticates the request, checks the operation's role
// and project, and the holder of a worker route, then hands the principal
// to done.
func (a *authenticator) authorize(in *openapi3filter.AuthenticationInput, done func(principal)) error {
	rvi := in.RequestValidationInput
	p, err := a.authenticate(rvi.Request)
	if err != nil {
		return err
	}
	if !hasRole(p.role, operationRole(rvi.Request.Method, rvi.Route.Operation.Extensions)) {
		return errForbidden
	}
	if project, ok := rvi.PathParams["project"]; ok && !p.mayReach(project) {
		return errOtherProject
	}
	if err := a.checkHolder(rvi, &p); err != nil {
		return err
	}
	done(p)
	return nil
}
