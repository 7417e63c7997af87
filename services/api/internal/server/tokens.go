package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/problem"
	"github.com/capstan-run/capstan/pkg/store"
)

// The token routes (admin only, by the spec's x-capstan-role): create, list
// and revoke API tokens.

// CreateToken makes a token and answers its secret, this once. An expiry in
// the past is a 422, and so are projects on an admin or worker token: those
// roles reach every project (an admin manages tokens and weights across
// them, a worker runs any project's attempts), so a scope would only
// promise a limit that does not hold.
func (h *Handlers) CreateToken(ctx context.Context, req api.CreateTokenRequestObject) (api.CreateTokenResponseObject, error) {
	b := req.Body
	if b.ExpiresAt != nil && !b.ExpiresAt.After(time.Now()) {
		return asUnprocessable[api.CreateToken422ApplicationProblemPlusJSONResponse](apiProblem(http.StatusUnprocessableEntity,
			problem.CodeInvalid, "expires_at: must be in the future")), nil
	}
	if b.Projects != nil && len(*b.Projects) > 0 && (b.Role == api.RoleAdmin || b.Role == api.RoleWorker) {
		return asUnprocessable[api.CreateToken422ApplicationProblemPlusJSONResponse](apiProblem(http.StatusUnprocessableEntity,
			problem.CodeInvalid, fmt.Sprintf("projects: a %s token reaches every project; scopes are for reader and writer tokens", b.Role))), nil
	}
	nt := store.NewToken{Name: b.Name, Role: string(b.Role), ExpiresAt: b.ExpiresAt}
	if b.Projects != nil {
		nt.Projects = *b.Projects
	}
	t, secret, err := h.store.Tokens().CreateToken(ctx, nt)
	if err != nil {
		return nil, fmt.Errorf("create token %q: %w", nt.Name, err)
	}
	h.log.Info("token created", "token", t.ID, "name", t.Name, "role", t.Role, "projects", []string(t.Projects))
	out := toToken(t)
	out.Token = &secret
	return api.CreateToken201JSONResponse(out), nil
}

// ListTokens lists the tokens made through the API, without secrets.
func (h *Handlers) ListTokens(ctx context.Context, _ api.ListTokensRequestObject) (api.ListTokensResponseObject, error) {
	ts, err := h.store.Tokens().ListTokens(ctx)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out := api.TokenList{Tokens: make([]api.Token, len(ts))}
	for i, t := range ts {
		out.Tokens[i] = toToken(t)
	}
	return api.ListTokens200JSONResponse(out), nil
}

// RevokeToken revokes a token: from now on it answers 401.
func (h *Handlers) RevokeToken(ctx context.Context, req api.RevokeTokenRequestObject) (api.RevokeTokenResponseObject, error) {
	t, err := h.store.Tokens().RevokeToken(ctx, req.Id.String())
	if errors.Is(err, store.ErrNotFound) {
		return asNotFound[api.RevokeToken404ApplicationProblemPlusJSONResponse](apiProblem(http.StatusNotFound,
			problem.CodeNotFound, "token "+req.Id.String()+" not found")), nil
	}
	if err != nil {
		return nil, fmt.Errorf("revoke token %s: %w", req.Id, err)
	}
	h.auth.forgetTokens()
	h.log.Info("token revoked", "token", t.ID, "name", t.Name)
	return api.RevokeToken204Response{}, nil
}

func toToken(t store.Token) api.Token {
	projects := []string(t.Projects)
	if projects == nil {
		projects = []string{}
	}
	return api.Token{Id: t.ID, Name: t.Name, Role: api.Role(t.Role), Projects: projects, ExpiresAt: t.ExpiresAt,
		RevokedAt: t.RevokedAt, CreatedAt: t.CreatedAt}
}
