package archive

import (
	// The drivers every build has: a directory, and S3 or a store that
	// speaks its API (?endpoint=).
	_ "gocloud.dev/blob/fileblob"
	_ "gocloud.dev/blob/s3blob"
)

// optionalDrivers are the URL schemes whose drivers a build has only with
// the build tag each names (drivers_gcs.go, drivers_azblob.go): each SDK's
// packages hold memory from the start of every process that links them
// (gs about 12 MiB of resident memory, azblob about 6).
var optionalDrivers = map[string]string{"gs": "archive_gcs", "azblob": "archive_azblob"}
