// Package archive keeps ended runs as documents in a blob bucket before
// they are deleted (Temporal's archival, Argo's workflow archive), and
// reads them back.
//
// The bucket is a gocloud.dev blob URL (CAPSTAN_ARCHIVE_URL):
// file:///var/lib/capstan/archive or s3://bucket?region=… in every build,
// gs://bucket with the build tag archive_gcs and azblob://container with
// archive_azblob (drivers.go); each driver reads its credentials as its
// SDK does.
// A run is one object, a gzip'd JSON Document, at
//
//	<project>/<domain>/<yyyy>/<mm>/<dd>/<run>.json.gz
//
// the date its ended_at in UTC (Key). An object is written whole or not at
// all: a failed Put leaves no partial document.
package archive

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/capstan-run/capstan/pkg/domain"
	"gocloud.dev/blob"
)

// EnvURL is the environment variable that names the bucket.
const EnvURL = "CAPSTAN_ARCHIVE_URL"

// ErrNotFound: the run has no document in the archive.
var ErrNotFound = errors.New("run not archived")

// Archive is an open bucket of run documents. A nil *Archive is an archive
// that is off: Open returns one for an empty URL.
type Archive struct {
	bucket *blob.Bucket
	// logTail bounds each stream of each attempt's logs in a document, in
	// bytes.
	logTail int
}

// DefaultLogTailBytes is how much of each stream of each attempt's output
// a document keeps, its last bytes: 64 KiB.
const DefaultLogTailBytes = 64 << 10

// Open opens the bucket of url, a gocloud.dev blob URL; an empty url
// returns a nil *Archive (the archive is off) and no error. Errors: a url
// that no driver opens (an unknown scheme, a missing file:// directory, a
// bad option), naming EnvURL, and for a scheme whose driver this build
// leaves out, the build tag that adds it.
func Open(ctx context.Context, url string) (*Archive, error) {
	if url == "" {
		return nil, nil
	}
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		// The driver's error may quote the URL: it is shown redacted.
		shown := redacted(url)
		msg := fmt.Sprintf("%s %s: %s", EnvURL, shown, strings.ReplaceAll(err.Error(), url, shown))
		scheme, _, _ := strings.Cut(url, "://")
		if tag, ok := optionalDrivers[scheme]; ok && !blob.DefaultURLMux().ValidBucketScheme(scheme) {
			msg += fmt.Sprintf(" (this build has no %s:// driver: build with -tags %s)", scheme, tag)
		}
		return nil, errors.New(msg)
	}
	return &Archive{bucket: b, logTail: DefaultLogTailBytes}, nil
}

// redacted is u without its query and password, which may hold
// credentials, for an error to show.
func redacted(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	p.RawQuery = ""
	return p.Redacted()
}

// Close closes the bucket; closing a nil *Archive does nothing.
func (a *Archive) Close() error {
	if a == nil {
		return nil
	}
	return a.bucket.Close()
}

// Key is the object key of key's run that ended at ended:
// <project>/<domain>/<yyyy>/<mm>/<dd>/<run>.json.gz, the date in UTC.
func Key(key domain.RunKey, ended time.Time) string {
	return path.Join(key.Project, key.Domain, ended.UTC().Format("2006/01/02"), key.Run+objectSuffix)
}

// objectSuffix ends every document's key.
const objectSuffix = ".json.gz"
