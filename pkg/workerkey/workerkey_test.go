package workerkey

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	testSecret = "0123456789abcdef0123456789abcdef"
	testWorker = "8f14e45f-ceea-467f-a0e6-6c2b4d5b1e3c"
)

// TestDerivationIsStable: the api, the scheduler and the abort reconciler
// of different releases derive the same secrets from one key, so the
// derivation is pinned (the values come from Python's hmac module).
func TestDerivationIsStable(t *testing.T) {
	t.Parallel()
	k := New(testSecret)
	require.Equal(t, "capx_iTnqowfp_Fe3q8ZBEPL-dtreW3-r6Y5cHjqrhFFMGao", k.Credential(testWorker))
	require.Equal(t, "caa4a0f594b81ed0dfbb1fe029fe9897b5f164c45f27527d2c5c4097c0bba2ad",
		hex.EncodeToString(k.DispatchKey(testWorker)))
}

// TestSecretsAreEachWorkersOwn: another worker, or another key, derives
// other secrets; one worker's credential is not its dispatch key.
func TestSecretsAreEachWorkersOwn(t *testing.T) {
	t.Parallel()
	k := New(testSecret)
	other := "0b4e7a0e-5fe8-4c0e-9f1a-2a3e4b5c6d7e"
	require.NotEqual(t, k.Credential(testWorker), k.Credential(other))
	require.NotEqual(t, k.DispatchKey(testWorker), k.DispatchKey(other))
	require.NotEqual(t, k.Credential(testWorker), New(testSecret+"x").Credential(testWorker))
	require.NotEqual(t, k.Credential(testWorker), CredentialPrefix+EncodeDispatchKey(k.DispatchKey(testWorker)))
	require.Len(t, k.DispatchKey(testWorker), 32)
}

func TestZeroKey(t *testing.T) {
	t.Parallel()
	require.True(t, New("").IsZero())
	require.True(t, Key{}.IsZero())
	require.False(t, New(testSecret).IsZero())
}

func TestDigestAndDispatchKeyEncoding(t *testing.T) {
	t.Parallel()
	k := New(testSecret)
	c := k.Credential(testWorker)
	require.Equal(t, Digest(c), Digest(c))
	require.NotEqual(t, Digest(c), Digest(k.Credential("another")))
	require.Len(t, Digest(c), 32)

	dk := k.DispatchKey(testWorker)
	got, err := DecodeDispatchKey(EncodeDispatchKey(dk))
	require.NoError(t, err)
	require.Equal(t, dk, got)
	_, err = DecodeDispatchKey("not base64!")
	require.Error(t, err)
	_, err = DecodeDispatchKey(EncodeDispatchKey(dk[:16]))
	require.ErrorContains(t, err, "16 bytes")
}
