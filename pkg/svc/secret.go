package svc

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MinSecretBytes is the shortest secret a service starts with: 32 bytes, a
// 256-bit random value's raw bytes (store.NewTokenSecret gives 43
// characters after its prefix).
const MinSecretBytes = 32

// placeholders are parts of a value that marks it as an example to
// replace, compared case-insensitively.
var placeholders = []string{"change-me", "change_me", "changeme", "replace-me", "replace_me", "placeholder",
	"not-for-anything", "example", "xxxxxxxx"}

// CheckSecrets refuses secrets a service must not start with: each value
// of secrets (keyed by its environment variable) that is set but shorter
// than MinSecretBytes or holds a placeholder (change-me, example, …). An
// empty value is unset and passes: whether a secret is required is the
// service's rule. The error names each refused variable, never its value.
func CheckSecrets(secrets map[string]string) error {
	names := make([]string, 0, len(secrets))
	for name := range secrets {
		names = append(names, name)
	}
	slices.Sort(names)
	var errs []error
	for _, name := range names {
		v := secrets[name]
		lower := strings.ToLower(v)
		switch {
		case v == "":
		case slices.ContainsFunc(placeholders, func(p string) bool { return strings.Contains(lower, p) }):
			errs = append(errs, fmt.Errorf("%s is a placeholder: set a random secret (e.g. openssl rand -base64 32)", name))
		case len(v) < MinSecretBytes:
			errs = append(errs, fmt.Errorf("%s is %d bytes: a secret needs at least %d (e.g. openssl rand -base64 32)",
				name, len(v), MinSecretBytes))
		}
	}
	return errors.Join(errs...)
}
