package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Cache statuses of an action (Flyte's catalog statuses).
const (
	// CacheHit: a valid entry existed; the step SUCCEEDED with its outputs
	// and ran no task.
	CacheHit = "HIT"
	// CacheMiss: no entry; the step runs.
	CacheMiss = "MISS"
	// CachePopulated: the step ran, succeeded and wrote its entry.
	CachePopulated = "POPULATED"
)

// CacheSpec makes a task step discoverable (Flyte's catalog): Version is
// part of the key (bump it to invalidate), Serializable makes concurrent
// runs of one key wait for a single execution (a reservation), and MaxAge
// (a Go duration, "" = forever) bounds how long an entry is a hit.
type CacheSpec struct {
	Version      string `json:"version"`
	Serializable bool   `json:"serializable,omitempty"`
	MaxAge       string `json:"max_age,omitempty"`
}

// cacheVersion is the form of CacheSpec.Version.
var cacheVersion = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// ValidCacheVersion reports whether v is a cache version's form: 1-63
// characters of [A-Za-z0-9._-].
func ValidCacheVersion(v string) bool { return cacheVersion.MatchString(v) }

// MaxAgeDuration parses MaxAge; 0 means entries never expire.
func (c CacheSpec) MaxAgeDuration() time.Duration { return parseDuration(c.MaxAge) }

func (c *CacheSpec) validate(s Step) []FieldError {
	var errs []FieldError
	if !cacheVersion.MatchString(c.Version) {
		errs = append(errs, FieldError{".cache.version", fmt.Sprintf("must be 1-63 characters of [A-Za-z0-9._-], e.g. \"v1\"; got %q", clipText(c.Version))})
	}
	if msg := durationProblem(c.MaxAge); msg != "" {
		errs = append(errs, FieldError{".cache.max_age", msg})
	}
	if s.Plugin == PluginNoop {
		errs = append(errs, FieldError{".cache", "a noop step has nothing to cache"})
	}
	return errs
}

// CacheKey is the catalog key of a discoverable step's execution, scoped to
// project and dom: the hex SHA-256 of the project, the domain, the cache
// version, the canonical plugin spec, the replicas, the declared outputs and
// the resolved inputs (name → value; JSON sorts the names). Two runs whose
// steps agree on all of them share an entry.
func CacheKey(project, dom string, s Step, inputs map[string]string) string {
	version := ""
	if s.Cache != nil {
		version = s.Cache.Version
	}
	outputs := slices.Clone(s.Outputs)
	slices.Sort(outputs)
	b, err := json.Marshal(struct {
		Project  string            `json:"project"`
		Domain   string            `json:"domain"`
		Version  string            `json:"version"`
		Plugin   PluginSpec        `json:"plugin"`
		Replicas int               `json:"replicas"`
		Outputs  []string          `json:"outputs"`
		Inputs   map[string]string `json:"inputs"`
	}{project, dom, version, s.PluginSpec(), s.ReplicaCount(), outputs, inputs})
	if err != nil { // only strings, ints and maps of strings: cannot happen
		panic(fmt.Sprintf("cache key: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CacheEntryValid reports whether an entry written at createdAt, expiring
// at expiresAt (nil = never; the writer's created_at + max_age), is a hit
// at now for a reader whose own max_age is maxAge (0 = any age): the entry
// must be unexpired by both, so a step asking for fresher results than
// another step of the same key wrote gets a miss (Flyte's catalog: an
// artifact is valid while younger than the reader's max cache age).
func CacheEntryValid(createdAt time.Time, expiresAt *time.Time, maxAge time.Duration, now time.Time) bool {
	if CacheEntryExpired(expiresAt, now) {
		return false
	}
	return maxAge <= 0 || now.Before(createdAt.Add(maxAge))
}

// CacheEntryExpired reports whether an entry expiring at expiresAt (the
// writer's created_at + max_age; nil when the writer set no max_age, and
// then never) has expired at now: from expiresAt on. An expired entry is a
// hit for no reader, so the scheduler's cache sweep deletes it: the store's
// statement states this rule in SQL, and its tests hold the two to agree
// at the boundary. A reader's own max_age expires nothing:
// another reader may still hit the entry.
func CacheEntryExpired(expiresAt *time.Time, now time.Time) bool {
	return expiresAt != nil && !now.Before(*expiresAt)
}

// InputProducers returns the steps inputs read, each once, in first-use
// order.
func InputProducers(inputs []Input) []string {
	var producers []string
	for _, in := range inputs {
		if step, _ := in.Producer(); !slices.Contains(producers, step) {
			producers = append(producers, step)
		}
	}
	return producers
}

// ResolveInputs returns each input's value, NAME → the producing step's
// output in outputs (step → output → value); a value the producer does not
// have is "". Nil when there are no inputs.
func ResolveInputs(inputs []Input, outputs map[string]map[string]string) map[string]string {
	if len(inputs) == 0 {
		return nil
	}
	values := make(map[string]string, len(inputs))
	for _, in := range inputs {
		step, output := in.Producer()
		values[in.As] = outputs[step][output]
	}
	return values
}
