//go:build archive_gcs

package archive

import _ "gocloud.dev/blob/gcsblob" // gs://bucket
