package redis

import (
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The scripts, one per operation. Each file's header lists its KEYS, ARGV
// and return values. rueidis computes the SHA1 once; Exec sends EVALSHA and
// falls back to EVAL when Redis answers NOSCRIPT (after a restart or
// SCRIPT FLUSH), which also loads it for the next call.
var (
	// give_back.lua is not a script of its own: it defines the quota
	// give-back that claim, release and reap run, and is prepended to them.
	//go:embed lua/give_back.lua
	giveBackLua string

	//go:embed lua/claim.lua
	claimFile   string
	claimLua    = giveBackLua + claimFile
	claimScript = rueidis.NewLuaScript(claimLua)

	//go:embed lua/restore.lua
	restoreLua    string
	restoreScript = rueidis.NewLuaScript(restoreLua)

	//go:embed lua/renew.lua
	renewLua    string
	renewScript = rueidis.NewLuaScript(renewLua)

	//go:embed lua/release.lua
	releaseFile   string
	releaseLua    = giveBackLua + releaseFile
	releaseScript = rueidis.NewLuaScript(releaseLua)

	//go:embed lua/reap.lua
	reapFile   string
	reapLua    = giveBackLua + reapFile
	reapScript = rueidis.NewLuaScript(reapLua)

	//go:embed lua/get.lua
	getLua    string
	getScript = rueidis.NewLuaScript(getLua)

	//go:embed lua/ensure_fence.lua
	ensureFenceLua    string
	ensureFenceScript = rueidis.NewLuaScript(ensureFenceLua)

	//go:embed lua/touch.lua
	touchLua    string
	touchScript = rueidis.NewLuaScript(touchLua)

	//go:embed lua/present.lua
	presentLua    string
	presentScript = rueidis.NewLuaScript(presentLua)

	//go:embed lua/forget.lua
	forgetLua    string
	forgetScript = rueidis.NewLuaScript(forgetLua)
)

// Source is the text Redis runs for the script of lua/<name>.lua, with the
// parts prepended to it: for tools that load the scripts themselves (bench,
// beside redis-benchmark). ok is false for a name with no script.
func Source(name string) (src string, ok bool) {
	src, ok = map[string]string{
		"claim": claimLua, "restore": restoreLua, "renew": renewLua, "release": releaseLua,
		"reap": reapLua, "get": getLua, "ensure_fence": ensureFenceLua, "touch": touchLua,
		"present": presentLua, "forget": forgetLua,
	}[name]
	return src, ok
}

// ttlArg converts a TTL to the scripts' whole milliseconds, rounding up so
// a lease never lives shorter than asked.
func ttlArg(ttl time.Duration) (string, error) {
	if ttl <= 0 {
		return "", fmt.Errorf("ttl must be positive, got %v", ttl)
	}
	ms := (ttl + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(ms), 10), nil
}

// fenceArg formats a token as the scripts compare it: canonical decimal.
func fenceArg(f uint64) string { return strconv.FormatUint(f, 10) }

// parseFence reads a token a script returned.
func parseFence(m *rueidis.RedisMessage) (uint64, error) {
	s, err := m.ToString()
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("BUG: script returned fence %q: %w", s, err)
	}
	return f, nil
}

// parseMillis reads an expiry a script returned, as an integer or a score.
func parseMillis(m *rueidis.RedisMessage) (time.Time, error) {
	if n, err := m.AsInt64(); err == nil {
		return time.UnixMilli(n), nil
	}
	f, err := m.AsFloat64()
	if err != nil {
		return time.Time{}, fmt.Errorf("BUG: script returned expiry %v: %w", m, err)
	}
	return time.UnixMilli(int64(f)), nil
}
