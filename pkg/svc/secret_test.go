package svc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Short and placeholder secrets are refused, naming the variable and not
// the value; unset and strong ones pass.
func TestCheckSecrets(t *testing.T) {
	t.Parallel()
	strong := "cap_" + strings.Repeat("k3", 20)
	require.NoError(t, CheckSecrets(map[string]string{"A": "", "B": strong}))
	err := CheckSecrets(map[string]string{"SHORT": "secret", "COMPOSE": "compose-admin-token-change-me-please-now",
		"DEV": "dev-admin-token-not-for-anything-you-keep", "OK": strong})
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "COMPOSE is a placeholder")
	require.Contains(t, msg, "DEV is a placeholder")
	require.Contains(t, msg, "SHORT is 6 bytes: a secret needs at least 32")
	require.NotContains(t, msg, "OK")
	require.NotContains(t, msg, "compose-admin-token")
}
