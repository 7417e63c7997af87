package queue

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/capstan-run/capstan/pkg/workerapi"
)

// ErrBadSpecMAC: a dispatched spec's MAC does not verify under the
// worker's dispatch key (the spec was forged or altered in Redis, or is
// another worker's); nothing of it may run.
var ErrBadSpecMAC = errors.New("dispatched spec's MAC does not verify")

// specMACLabel starts the input of every dispatched spec's MAC.
const specMACLabel = "capstan dispatched attempt spec v1\x00"

// SignedSpec is one dispatched attempt's spec as a placement pass bound
// it, with its MAC: what its attempt:run or attempts:run message carries
// (NewAttemptsRunTask). Spec is the spec's JSON, kept as the bytes that
// were signed; MAC is HMAC-SHA256, under the dispatch key of the worker
// whose queue the message goes to (workerkey.Key.DispatchKey, which only
// the scheduler and that worker's executor hold), of a label and those
// bytes. Whoever can write to Redis without the key can forge no spec that
// verifies, alter none, and move none to another worker's queue.
type SignedSpec struct {
	Spec json.RawMessage `json:"spec"`
	MAC  []byte          `json:"mac"`
}

// SignSpec returns spec signed under key, a worker's dispatch key. Errors:
// encoding/json's.
func SignSpec(key []byte, spec workerapi.AttemptSpec) (SignedSpec, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return SignedSpec{}, fmt.Errorf("sign attempt %d's spec: %w", spec.Id, err)
	}
	return SignedSpec{Spec: raw, MAC: specMAC(key, raw)}, nil
}

// Verify returns the spec s carries once its MAC verifies under key, the
// dispatch key of the worker that received it. Errors: ErrBadSpecMAC (key
// nil or empty included), a spec that does not decode.
func (s SignedSpec) Verify(key []byte) (workerapi.AttemptSpec, error) {
	if len(key) == 0 || !hmac.Equal(s.MAC, specMAC(key, s.Spec)) {
		return workerapi.AttemptSpec{}, ErrBadSpecMAC
	}
	var spec workerapi.AttemptSpec
	if err := json.Unmarshal(s.Spec, &spec); err != nil {
		return workerapi.AttemptSpec{}, fmt.Errorf("signed spec: %w", err)
	}
	return spec, nil
}

func specMAC(key, raw []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(specMACLabel))
	h.Write(raw)
	return h.Sum(nil)
}
