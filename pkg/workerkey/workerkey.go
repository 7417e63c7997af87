// Package workerkey derives the secrets the control plane shares with each
// registered worker from one control-plane key (CAPSTAN_CONTROL_PLANE_KEY),
// which the api, the scheduler and the abort reconciler hold and no
// executor does. Each worker gets two, both HMAC-SHA256 of its worker id
// under the key, with a label apiece:
//
//   - its executor credential (Credential): the bearer secret the abort
//     reconciler presents to that worker's executor API, which the executor
//     learns from its registration answer and requires of every call;
//   - its dispatch key (DispatchKey): the key of the MAC the scheduler puts
//     on every attempt spec it dispatches through Redis to that worker's
//     queue, which the executor checks before it runs anything
//     (queue.SignedSpec).
//
// A worker id is a new random UUID at every registration, so it is the
// registration's epoch: an executor that registers again (a restart, or
// the control plane forgot it) gets new secrets, and the old ones open
// nothing. Nothing plaintext is stored: Postgres keeps the SHA-256 of the
// credential (Digest), against which the reconciler checks what it derived
// before it sends it. A worker never learns another worker's secrets, nor
// the key they come from.
package workerkey

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// Labels keep the two secrets of one worker apart: neither reveals the
// other.
const (
	credentialLabel  = "capstan executor credential v1\x00"
	dispatchKeyLabel = "capstan dispatch key v1\x00"
)

// CredentialPrefix starts every executor credential, so that a leaked one
// is recognisable (in logs, by secret scanners).
const CredentialPrefix = "capx_"

// Key is the control-plane key. The zero Key is unset: IsZero.
type Key struct{ secret []byte }

// New returns the Key of secret, CAPSTAN_CONTROL_PLANE_KEY as given; ""
// is the zero Key. Its length and randomness are the caller's to check
// (svc.CheckSecrets: at least 32 bytes).
func New(secret string) Key {
	if secret == "" {
		return Key{}
	}
	return Key{secret: []byte(secret)}
}

// IsZero reports whether k is unset.
func (k Key) IsZero() bool { return len(k.secret) == 0 }

// Credential returns worker workerID's executor credential: CredentialPrefix
// and the base64url (no padding) of HMAC-SHA256(k, label ‖ workerID), 32
// bytes.
func (k Key) Credential(workerID string) string {
	return CredentialPrefix + base64.RawURLEncoding.EncodeToString(k.mac(credentialLabel, workerID))
}

// DispatchKey returns worker workerID's dispatch key: HMAC-SHA256(k, label
// ‖ workerID), 32 bytes.
func (k Key) DispatchKey(workerID string) []byte { return k.mac(dispatchKeyLabel, workerID) }

func (k Key) mac(label, workerID string) []byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte(label))
	h.Write([]byte(workerID))
	return h.Sum(nil)
}

// Digest is the stored form of an executor credential: its SHA-256.
func Digest(credential string) []byte {
	sum := sha256.Sum256([]byte(credential))
	return sum[:]
}

// EncodeDispatchKey is a dispatch key as the registration answer carries
// it: base64url, no padding.
func EncodeDispatchKey(key []byte) string { return base64.RawURLEncoding.EncodeToString(key) }

// DecodeDispatchKey reverses EncodeDispatchKey. Errors: s is not base64url,
// or not of 32 bytes.
func DecodeDispatchKey(s string) ([]byte, error) {
	key, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("dispatch key: %w", err)
	}
	if len(key) != sha256.Size {
		return nil, fmt.Errorf("dispatch key: %d bytes, want %d", len(key), sha256.Size)
	}
	return key, nil
}
