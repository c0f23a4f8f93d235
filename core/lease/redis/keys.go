package redis

import (
	"fmt"
	"strings"
)

// DefaultPrefix names a deployment's keys when Options.Prefix is empty.
const DefaultPrefix = "rlsched"

// Names of the keys of one deployment. Nothing else is ever written.
const (
	nameFence    = "fence"         // string: the highest token handed out
	nameLeases   = "leases"        // hash: task ID -> "fence:worker"
	nameExpiry   = "lease_expiry"  // zset: task ID -> expiry (ms, Redis clock)
	namePresence = "presence"      // zset: worker ID -> expiry (ms, Redis clock)
	nameMasters  = "presence_host" // hash: worker ID -> master ID
	nameReady    = "ready"         // string: set by MarkReady; gone after a flush or an empty restart
)

// key is the one function that builds a key: "{prefix}:name". The braces
// make the whole prefix the key's hash tag, so every key of a deployment
// lands in one Redis Cluster slot (the scripts touch several at once) and
// different prefixes spread over slots.
func key(prefix, name string) string { return "{" + prefix + "}:" + name }

// keys are the keys of one deployment, built once.
type keys struct {
	fence, leases, expiry, presence, masters, ready string
}

func newKeys(prefix string) keys {
	return keys{
		fence:    key(prefix, nameFence),
		leases:   key(prefix, nameLeases),
		expiry:   key(prefix, nameExpiry),
		presence: key(prefix, namePresence),
		masters:  key(prefix, nameMasters),
		ready:    key(prefix, nameReady),
	}
}

// checkPrefix refuses prefixes that would break the hash tag or the
// glob pattern that finds a deployment's keys.
func checkPrefix(p string) error {
	if p == "" || len(p) > 128 || strings.ContainsAny(p, "{}*?[]\\ \t\r\n") {
		return fmt.Errorf("invalid key prefix %q: want 1–128 characters without braces, glob characters or spaces", p)
	}
	return nil
}

// KeyPattern is the SCAN MATCH pattern of every key under prefix, for
// tools and test cleanup; the backend itself never scans.
func KeyPattern(prefix string) string { return key(prefix, "*") }
