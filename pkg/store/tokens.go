package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// API tokens (api_tokens): a bearer secret of TokenSecretBytes random
// bytes, stored as its SHA-256 only. The roles and the rules that read them
// live in the api; these are the statements.

// TokenSecretBytes is the size of a token's random secret, in bytes.
const TokenSecretBytes = 32

// TokenPrefix starts every secret NewTokenSecret makes, so that a leaked
// token is recognisable (in logs, by secret scanners).
const TokenPrefix = "cap_"

// Token is a row of api_tokens.
type Token struct {
	ID       string
	Hash     []byte
	Name     string
	Role     string
	Projects Strings `gorm:"type:text[]"`
	// WorkerID names the worker a token minted at registration speaks for
	// (nil for every other token); the row is deleted with the worker.
	WorkerID  *string
	ExpiresAt *time.Time
	RevokedAt *time.Time
	CreatedAt time.Time
}

// TableName is api_tokens.
func (Token) TableName() string { return "api_tokens" }

// NewToken is what CreateToken inserts.
type NewToken struct {
	Name, Role string
	// Projects scopes the token; empty: every project.
	Projects  []string
	WorkerID  *string
	ExpiresAt *time.Time
}

// NewTokenSecret returns a new random secret: TokenPrefix and the base64url
// of TokenSecretBytes bytes from crypto/rand.
func NewTokenSecret() string {
	b := make([]byte, TokenSecretBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// HashToken is the stored form of a secret: its SHA-256.
func HashToken(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// CreateToken inserts a token with a new secret and returns the row and the
// secret, which is never stored and cannot be read again.
func (s Tokens) CreateToken(ctx context.Context, nt NewToken) (Token, string, error) {
	secret := NewTokenSecret()
	projects := nt.Projects
	if projects == nil {
		projects = []string{}
	}
	t := Token{ID: uuid.NewString(), Hash: HashToken(secret), Name: nt.Name, Role: nt.Role, Projects: projects,
		WorkerID: nt.WorkerID, ExpiresAt: nt.ExpiresAt, CreatedAt: dbNow()}
	if err := mapErr(s.q(ctx).Create(&t).Error); err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}

// TokenByHash returns the token whose secret hashes to hash, revoked and
// expired ones included (the caller decides), or ErrNotFound.
func (s Tokens) TokenByHash(ctx context.Context, hash []byte) (Token, error) {
	var t Token
	err := s.q(ctx).Where("hash = ?", hash).Take(&t).Error
	return t, mapErr(err)
}

// ListTokens returns the tokens made through the API (not the ones minted
// for workers), newest first.
func (s Tokens) ListTokens(ctx context.Context) ([]Token, error) {
	var ts []Token
	err := s.q(ctx).Where("worker_id IS NULL").Order("created_at DESC, id").Find(&ts).Error
	return ts, mapErr(err)
}

// RevokeToken sets a token's revoked_at (once; revoking again keeps the
// first time). ErrNotFound when no such token.
func (s Tokens) RevokeToken(ctx context.Context, id string) (Token, error) {
	if err := uuid.Validate(id); err != nil {
		return Token{}, ErrNotFound
	}
	var t Token
	res := s.q(ctx).Model(&t).Where("id = ?", id).
		Update("revoked_at", gorm.Expr("coalesce(revoked_at, now())"))
	if err := mapErr(res.Error); err != nil {
		return Token{}, err
	}
	if res.RowsAffected == 0 {
		return Token{}, ErrNotFound
	}
	err := s.q(ctx).Where("id = ?", id).Take(&t).Error
	return t, mapErr(err)
}
