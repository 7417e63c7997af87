package queue_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/capstan-run/capstan/pkg/api"
	"github.com/capstan-run/capstan/pkg/queue"
	"github.com/capstan-run/capstan/pkg/workerapi"
	"github.com/capstan-run/capstan/pkg/workerkey"
	"github.com/stretchr/testify/require"
)

var testKey = workerkey.New("test-control-plane-key-0123456789abcdef")

func testSpec() workerapi.AttemptSpec {
	worker := "8f14e45f-ceea-467f-a0e6-6c2b4d5b1e3c"
	env := map[string]string{"A": "1", "HTML": "<a & b>"}
	return workerapi.AttemptSpec{Id: 7, Number: 1, Project: "p", Domain: "d", Run: "r", Action: "s", Replicas: 1,
		Plugin: "shell", Command: "echo ok", Env: env, State: api.TaskStateASSIGNED, WorkerId: &worker, Proceed: true}
}

// TestSignedSpecRoundTrips: a spec signed for a worker verifies under that
// worker's dispatch key once it went through an attempt:run or an
// attempts:run payload, and comes back equal.
func TestSignedSpecRoundTrips(t *testing.T) {
	t.Parallel()
	key := testKey.DispatchKey("w1")
	spec := testSpec()
	signed, err := queue.SignSpec(key, spec)
	require.NoError(t, err)

	var one queue.AttemptPayload
	require.NoError(t, json.Unmarshal(queue.NewAttemptsRunTask("w1", []int64{7}, []queue.SignedSpec{signed}).Payload(), &one))
	var many queue.AttemptsPayload
	require.NoError(t, json.Unmarshal(queue.NewAttemptsRunTask("w1", []int64{7, 8}, []queue.SignedSpec{signed}).Payload(), &many))
	require.NotNil(t, one.Spec)
	require.Len(t, many.Specs, 1)
	for _, got := range []queue.SignedSpec{*one.Spec, many.Specs[0]} {
		out, err := got.Verify(key)
		require.NoError(t, err)
		require.Equal(t, spec, out)
	}
}

// TestSignedSpecRefusesForgeries: a spec altered in any byte, a MAC
// altered, a spec signed for another worker, an unsigned spec, or a key of
// none does not verify.
func TestSignedSpecRefusesForgeries(t *testing.T) {
	t.Parallel()
	key := testKey.DispatchKey("w1")
	signed, err := queue.SignSpec(key, testSpec())
	require.NoError(t, err)

	altered := signed
	altered.Spec = bytes.Replace(signed.Spec, []byte("echo ok"), []byte("rm -rf"), 1)
	require.NotEqual(t, signed.Spec, altered.Spec)
	flipped := signed
	flipped.MAC = append([]byte{}, signed.MAC...)
	flipped.MAC[0] ^= 1
	other, err := queue.SignSpec(testKey.DispatchKey("w2"), testSpec())
	require.NoError(t, err)
	forged := testSpec()
	forged.Command = "touch /tmp/forged"
	raw, err := json.Marshal(forged)
	require.NoError(t, err)

	for name, c := range map[string]struct {
		s   queue.SignedSpec
		key []byte
	}{
		"altered spec":       {altered, key},
		"altered mac":        {flipped, key},
		"another worker's":   {other, key},
		"no mac":             {queue.SignedSpec{Spec: raw}, key},
		"mac of another key": {queue.SignedSpec{Spec: raw, MAC: signed.MAC}, key},
		"no key":             {signed, nil},
	} {
		_, err := c.s.Verify(c.key)
		require.ErrorIs(t, err, queue.ErrBadSpecMAC, name)
	}
}
