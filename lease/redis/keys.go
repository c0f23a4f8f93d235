package redis

import "github.com/rlsched/rlsched/internal/rediskey"

// DefaultPrefix names a deployment's keys when Options.Prefix is empty.
const DefaultPrefix = rediskey.DefaultPrefix

// keys are the keys of one deployment (package rediskey names them), built
// once.
type keys struct {
	fence, leases, expiry, presence, masters, ready string
	charges, quotaUse                               string
}

func newKeys(prefix string) keys {
	return keys{
		fence:    rediskey.Key(prefix, rediskey.Fence),
		leases:   rediskey.Key(prefix, rediskey.Leases),
		expiry:   rediskey.Key(prefix, rediskey.Expiry),
		presence: rediskey.Key(prefix, rediskey.Presence),
		masters:  rediskey.Key(prefix, rediskey.Masters),
		ready:    rediskey.Key(prefix, rediskey.Ready),
		charges:  rediskey.Key(prefix, rediskey.Charges),
		quotaUse: rediskey.Key(prefix, rediskey.QuotaUse),
	}
}

// KeyPattern is the SCAN MATCH pattern of every key under prefix, for
// tools and test cleanup; the backend itself never scans.
func KeyPattern(prefix string) string { return rediskey.Pattern(prefix) }
