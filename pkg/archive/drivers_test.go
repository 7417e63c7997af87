//go:build !archive_gcs && !archive_azblob

package archive_test

import (
	"context"
	"testing"

	"github.com/capstan-run/capstan/pkg/archive"
	"github.com/stretchr/testify/require"
)

// A scheme whose driver the build leaves out names the build tag that adds
// it: a build without them.
func TestOpenNamesTheTagOfAnOptionalDriver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := archive.Open(ctx, "gs://bucket")
	require.ErrorContains(t, err, "build with -tags archive_gcs")
	_, err = archive.Open(ctx, "azblob://container")
	require.ErrorContains(t, err, "build with -tags archive_azblob")
}
