package server

import (
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/capstan-run/capstan/pkg/store"
)

// templateCacheLen bounds the template versions (and, apart, the names) a
// templateCache remembers.
const templateCacheLen = 1024

// templateCache remembers the template versions the api read, which never
// change, and each name's latest version as last read, which may: a create
// from the cache is guarded (store.RunOrigin.Guard), so a version deleted
// or superseded since, by this replica or another, is never run as if it
// were still the one asked for.
type templateCache struct {
	versions *lru.Cache[templateVersion, store.Template]
	latest   *lru.Cache[store.TemplateKey, int]
}

// templateVersion names one version of a template.
type templateVersion struct {
	key     store.TemplateKey
	version int
}

func newTemplateCache() *templateCache {
	versions, _ := lru.New[templateVersion, store.Template](templateCacheLen) // only a non-positive size fails
	latest, _ := lru.New[store.TemplateKey, int](templateCacheLen)
	return &templateCache{versions: versions, latest: latest}
}

// get returns version of key (0: the latest, as last read), when known.
func (c *templateCache) get(key store.TemplateKey, version int) (store.Template, bool) {
	if version == 0 {
		v, ok := c.latest.Get(key)
		if !ok {
			return store.Template{}, false
		}
		version = v
	}
	return c.versions.Get(templateVersion{key, version})
}

// add remembers t, read as version asked (0: the latest).
func (c *templateCache) add(t store.Template, asked int) {
	key := store.TemplateKey{Project: t.Project, Domain: t.Domain, Name: t.Name}
	c.versions.Add(templateVersion{key, t.Version}, t)
	if asked == 0 {
		c.latest.Add(key, t.Version)
	}
}

// forget drops what c knows of key's latest version and of version (0:
// none).
func (c *templateCache) forget(key store.TemplateKey, version int) {
	c.latest.Remove(key)
	c.versions.Remove(templateVersion{key, version})
}
