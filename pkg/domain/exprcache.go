package domain

import (
	"container/list"
	"sync"
)

// Heap a compiled expression holds, as measured with cel-go v0.31: about
// 1 KiB for a short one, and up to 36 bytes per byte of source (a 4 KiB
// expression of many terms, or a long literal list, holds about 140 KiB);
// charged with a margin.
const (
	exprHeapBase    = 1 << 10
	exprHeapPerByte = 40
)

// exprCacheBytes bounds the heap the compiled-expression cache holds, by
// the estimate above: 8 MiB, e.g. 3,600 expressions of 30 bytes or 50 of
// 4 KiB. The collector lets a service's heap grow to five times what it
// holds (GOGC=400, pkg/svc), so what the cache holds may count five times
// in a scheduler's resident memory: 40 MiB at most.
const exprCacheBytes = 8 << 20

// exprs caches every compiled expression, of every kind (each run's advance
// compiles its steps' conditions again, each delivery its triggers').
var exprs = newExprCache(exprCacheBytes)

// exprCache is an LRU cache of compiled expressions, by kind and source,
// within a budget of estimated heap bytes: adding one past the budget
// evicts the least recently used first. It is safe for concurrent use.
type exprCache struct {
	mu     sync.Mutex
	budget int64
	used   int64
	order  *list.List // of *exprEntry, most recently used first
	byKey  map[string]*list.Element
}

// exprEntry is one cached expression and the heap it is charged.
type exprEntry struct {
	key  string
	val  any
	size int64
}

// newExprCache returns an empty cache of budget bytes.
func newExprCache(budget int64) *exprCache {
	return &exprCache{budget: budget, order: list.New(), byKey: map[string]*list.Element{}}
}

// exprHeap is the heap charged for an expression of key's source.
func exprHeap(key string) int64 { return exprHeapBase + exprHeapPerByte*int64(len(key)) }

// get returns the value cached under key and marks it recently used.
func (c *exprCache) get(key string) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*exprEntry).val, true
}

// put caches val under key (replacing what it held), then evicts the least
// recently used entries until the cache is within its budget.
func (c *exprCache) put(key string, val any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		el.Value.(*exprEntry).val = val
		c.order.MoveToFront(el)
		return
	}
	e := &exprEntry{key: key, val: val, size: exprHeap(key)}
	c.byKey[key] = c.order.PushFront(e)
	c.used += e.size
	for c.used > c.budget {
		last := c.order.Back()
		old := last.Value.(*exprEntry)
		c.order.Remove(last)
		delete(c.byKey, old.key)
		c.used -= old.size
	}
}

// size returns how many entries the cache holds and the bytes they are
// charged.
func (c *exprCache) size() (entries int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.used
}
