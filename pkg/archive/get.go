package archive

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"

	"github.com/capstan-run/capstan/pkg/domain"
	"gocloud.dev/blob"
)

// ErrVersion: a document of a format newer than this reader's Version.
var ErrVersion = errors.New("archived run document of an unknown version")

// Get reads back key's document. The reader does not know the day the run
// ended, so Get walks the day prefixes of <project>/<domain>/ newest first
// (a List with delimiter "/" of the years, then of each year's months,
// then of each month's days) and asks whether the day holds <run>.json.gz
// (one Exists): finding a run archived n days ago costs about n + 2 Lists
// and n Exists, and an absent run one Exists per day the domain has
// documents of. A run name archived again (a new run of the same name
// deleted later) is found at its latest day. The whole document is read
// into memory. A nil *Archive finds nothing. Errors: ErrNotFound,
// ErrVersion, else the bucket's or a corrupt object's.
func (a *Archive) Get(ctx context.Context, key domain.RunKey) (Document, error) {
	if a == nil {
		return Document{}, ErrNotFound
	}
	name, err := a.find(ctx, key)
	if err != nil {
		return Document{}, err
	}
	r, err := a.bucket.NewReader(ctx, name, nil)
	if err != nil {
		return Document{}, fmt.Errorf("read archived run %s: %w", key, err)
	}
	defer r.Close()
	return decode(r, name)
}

// find returns the key of the newest object of key's run. Errors:
// ErrNotFound, the bucket's.
func (a *Archive) find(ctx context.Context, key domain.RunKey) (string, error) {
	years, err := a.dirs(ctx, path.Join(key.Project, key.Domain)+"/")
	if err != nil {
		return "", err
	}
	for _, y := range years {
		months, err := a.dirs(ctx, y)
		if err != nil {
			return "", err
		}
		for _, m := range months {
			days, err := a.dirs(ctx, m)
			if err != nil {
				return "", err
			}
			for _, d := range days {
				name := d + key.Run + objectSuffix
				ok, err := a.bucket.Exists(ctx, name)
				if err != nil {
					return "", fmt.Errorf("look for %s: %w", name, err)
				}
				if ok {
					return name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("run %s: %w", key, ErrNotFound)
}

// dirs lists the "directories" right under prefix (which ends in "/"),
// each ending in "/", newest (greatest) first.
func (a *Archive) dirs(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	it := a.bucket.List(&blob.ListOptions{Prefix: prefix, Delimiter: "/"})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		if o.IsDir {
			out = append(out, o.Key)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out, nil
}

// decode reads the gzip'd JSON document of object name from r. Errors: a
// corrupt object, ErrVersion.
func decode(r io.Reader, name string) (Document, error) {
	var d Document
	gz, err := gzip.NewReader(r)
	if err != nil {
		return d, fmt.Errorf("archived run %s: %w", name, err)
	}
	if err := json.NewDecoder(gz).Decode(&d); err != nil {
		return d, fmt.Errorf("archived run %s: decode: %w", name, err)
	}
	if d.Version < 1 || d.Version > Version {
		return d, fmt.Errorf("archived run %s: version %d: %w", name, d.Version, ErrVersion)
	}
	return d, nil
}
