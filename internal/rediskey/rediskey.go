// Package rediskey names everything rlsched keeps in Redis: the one place
// that checks a deployment's prefix (REDIS_PREFIX) and builds its keys and
// channels, for the lease backend, the cluster of masters and the gateways'
// rate limit. It does no I/O.
//
// Every key is "{prefix}:name": the braces make the whole prefix the key's
// hash tag, so every key of a deployment lands in one Redis Cluster slot
// (the lease scripts and the rate-limit script touch several at once) and
// different prefixes spread over slots. A pub/sub channel is "prefix:name"
// (channels have no slot).
package rediskey

import (
	"fmt"
	"strings"
)

// DefaultPrefix names a deployment when REDIS_PREFIX is empty.
const DefaultPrefix = "rlsched"

// The names under a prefix. Nothing else is ever written.
const (
	Fence     = "fence"         // string: the highest fencing token handed out (lease/redis)
	Leases    = "leases"        // hash: task ID -> "fence:worker"
	Expiry    = "lease_expiry"  // zset: task ID -> expiry (ms, Redis clock)
	Presence  = "presence"      // zset: worker ID -> expiry (ms, Redis clock)
	Masters   = "presence_host" // hash: worker ID -> master ID
	Ready     = "ready"         // string: set once a master built the state; gone after a flush or an empty restart
	Charges   = "quota_charges" // hash: task ID -> "user|gpus", the quota charge of its lease (lease/redis)
	QuotaUse  = "quota_use"     // hash: "g:<user>" / "r:<user>" -> GPUs / runs charged
	RateLimit = "gw_ratelimit:" // + subject (user or IP): zset of one gateway window (gateway)
	Cluster   = "cluster"       // pub/sub channel of the masters' events (package cluster)
)

// Check refuses a prefix that would break the hash tag or the glob pattern
// that finds a deployment's keys.
func Check(prefix string) error {
	if prefix == "" || len(prefix) > 128 || strings.ContainsAny(prefix, "{}*?[]\\ \t\r\n") {
		return fmt.Errorf("invalid REDIS_PREFIX %q: use 1–128 characters without braces, glob characters or spaces", prefix)
	}
	return nil
}

// Key is the one function that builds a key: "{prefix}:name". prefix must
// have passed Check.
func Key(prefix, name string) string { return "{" + prefix + "}:" + name }

// Channel names a pub/sub channel: "prefix:name". prefix must have passed
// Check.
func Channel(prefix, name string) string { return prefix + ":" + name }

// Pattern is the SCAN MATCH pattern of every key under prefix, for tools
// and test cleanup; rlsched itself never scans.
func Pattern(prefix string) string { return Key(prefix, "*") }
