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
	"time"

	"github.com/capstan-run/capstan/pkg/store"
	"github.com/getkin/kin-openapi/openapi3filter"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
)

// Roles of API tokens. Admin may do everything; a writer what a reader may
// and change runs; a worker only what executors call.
const (
	RoleAdmin  = "admin"
	RoleWriter = "writer"
	RoleReader = "reader"
	RoleWorker = "worker"
)

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
	case have == RoleAdmin:
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
	// tokens remembers TokenByHash's answers for tokenCacheTTL, so that an
	// executor's every report does not cost a statement. A revocation
	// through this api forgets them at once (forgetTokens); on another api
	// replica it takes effect within tokenCacheTTL. Expiry is checked on
	// every request.
	tokens *expirable.LRU[[sha256.Size]byte, store.Token]
	// holders remembers the worker of an attempt, which never changes once
	// the attempt is placed.
	holders *lru.Cache[int64, string]
}

// Bounds of the authenticator's caches.
const (
	tokenCacheTTL  = 5 * time.Second
	tokenCacheSize = 10_000
	holderCacheLen = 100_000
)

func newAuthenticator(st *store.Store, adminSecret, workerSecret string) *authenticator {
	holders, _ := lru.New[int64, string](holderCacheLen) // only a non-positive size fails
	a := &authenticator{store: st, now: time.Now, holders: holders,
		tokens: expirable.NewLRU[[sha256.Size]byte, store.Token](tokenCacheSize, nil, tokenCacheTTL)}
	if adminSecret != "" {
		a.admin = store.HashToken(adminSecret)
	}
	if workerSecret != "" {
		a.worker = store.HashToken(workerSecret)
	}
	return a
}

// Errors of authentication, answered by authProblem.
var (
	errNoToken   = errors.New("a bearer token is required (Authorization: Bearer <token>)")
	errBadToken  = errors.New("the token is unknown, revoked or expired")
	errForbidden = errors.New("the token's role does not allow this operation")
)

// forgetTokens drops every remembered token (after a revocation).
func (a *authenticator) forgetTokens() { a.tokens.Purge() }

// authenticate reads the Authorization header of req.
func (a *authenticator) authenticate(req *http.Request) (principal, error) {
	h := req.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return principal{}, errNoToken
	}
	hash := sha256.Sum256([]byte(strings.TrimSpace(secret)))
	if a.admin != nil && subtle.ConstantTimeCompare(hash[:], a.admin) == 1 {
		return principal{tokenID: "admin", name: "admin", role: RoleAdmin}, nil
	}
	if a.worker != nil && subtle.ConstantTimeCompare(hash[:], a.worker) == 1 {
		return principal{tokenID: "worker", name: "worker", role: RoleWorker}, nil
	}
	t, ok := a.tokens.Get(hash)
	if !ok {
		var err error
		t, err = a.store.Tokens().TokenByHash(req.Context(), hash[:])
		if errors.Is(err, store.ErrNotFound) {
			return principal{}, errBadToken
		}
		if err != nil {
			return principal{}, fmt.Errorf("look up bearer token: %w", err)
		}
		a.tokens.Add(hash, t)
	}
	if t.RevokedAt != nil || (t.ExpiresAt != nil && !a.now().Before(*t.ExpiresAt)) {
		return principal{}, errBadToken
	}
	p := principal{tokenID: t.ID, name: t.Name, role: t.Role, projects: t.Projects}
	if t.WorkerID != nil {
		p.workerID = *t.WorkerID
	}
	return p, nil
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
