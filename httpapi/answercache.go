package httpapi

import "sync"

// answerCache keeps encoded answers by key with the store version each was
// made from (store.Store's SweepSeriesVersion), so an answer that costs a
// large read, a sweep's curves, is made once while nothing it depends on
// changes. It holds at most max bytes, dropping the oldest first. Safe for
// concurrent use.
type answerCache struct {
	mu    sync.Mutex
	max   int
	size  int
	m     map[string]cachedAnswer
	order []string // keys, oldest first
}

type cachedAnswer struct {
	version string
	body    []byte
}

func newAnswerCache(max int) *answerCache {
	return &answerCache{max: max, m: map[string]cachedAnswer{}}
}

// has reports whether an answer of key is kept (of any version).
func (c *answerCache) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[key]
	return ok
}

// get returns the answer of key made at version, or nil.
func (c *answerCache) get(key, version string) []byte {
	if version == "" {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.m[key]; ok && a.version == version {
		return a.body
	}
	return nil
}

// put keeps body as key's answer at version ("" keeps nothing). The body
// must not change afterwards.
func (c *answerCache) put(key, version string, body []byte) {
	if version == "" || len(body) > c.max/2 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[key]; ok {
		c.size -= len(old.body)
	} else {
		c.order = append(c.order, key)
	}
	c.m[key] = cachedAnswer{version, body}
	c.size += len(body)
	for c.size > c.max && len(c.order) > 0 {
		k := c.order[0]
		c.order = c.order[1:]
		c.size -= len(c.m[k].body)
		delete(c.m, k)
	}
}
