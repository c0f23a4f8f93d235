package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/internal/rediskey"
	"github.com/rlsched/rlsched/lease"
	redislease "github.com/rlsched/rlsched/lease/redis"
)

// The claims scenario's reference: redis-benchmark sending the lease scripts
// by EVALSHA with the KEYS and ARGV lease/redis passes, so that one
// reference call is one backend call minus the client.

// leaseTTL is the TTL of every lease the scenario takes, on both sides.
const leaseTTL = time.Minute

const (
	// claimSpace is claim's -r: a task drawn from two thousand million
	// (redis-benchmark's -r is a C int) is fresh, as on the rueidis side.
	claimSpace = 2_000_000_000
	// refWorker and refFence hold every lease fillLeases puts back, so one
	// renew or release command carries the right token for any task.
	refWorker = "w1"
	refFence  = 1
)

// refCall is the command redis-benchmark repeats for one script: argv names
// its task with __rand_int__, which redis-benchmark replaces by a random
// 12-digit number below space (-r) in every call.
type refCall struct {
	script string
	argv   []string
	space  int
}

// refCalls are the three reference commands, in cycle order. Their KEYS and
// ARGV are those of lease/redis's Claim (a zero lease.Charge: no user,
// no caps), Renew (one renewal) and Release, built by the same rediskey.Key;
// the scenario's backend has DetectReset off, so no ready key follows.
// Renew and release name "t:" tasks below leased, which fillLeases holds;
// claim names fresh "c:" tasks. checkRefCalls proves each one works.
func refCalls(prefix string, shas map[string]string, leased int) []refCall {
	k := func(name string) string { return rediskey.Key(prefix, name) }
	ttl := strconv.FormatInt(leaseTTL.Milliseconds(), 10)
	fence := strconv.Itoa(refFence)
	var none lease.Charge
	return []refCall{
		{"claim", []string{"EVALSHA", shas["claim"], "5",
			k(rediskey.Fence), k(rediskey.Leases), k(rediskey.Expiry), k(rediskey.Charges), k(rediskey.QuotaUse),
			"c:__rand_int__", refWorker, ttl, none.User, strconv.Itoa(none.GPUs), strconv.Itoa(none.MaxGPUs), strconv.Itoa(none.MaxRuns)},
			claimSpace},
		{"renew", []string{"EVALSHA", shas["renew"], "2", k(rediskey.Leases), k(rediskey.Expiry),
			ttl, "t:__rand_int__", fence}, leased},
		{"release", []string{"EVALSHA", shas["release"], "4",
			k(rediskey.Leases), k(rediskey.Expiry), k(rediskey.Charges), k(rediskey.QuotaUse),
			"t:__rand_int__", fence}, leased},
	}
}

// loadRefScripts loads claim, renew and release as lease/redis sends
// them (some are files with parts prepended) and returns their SHA1s.
func loadRefScripts(ctx context.Context, c rueidis.Client) (map[string]string, error) {
	shas := map[string]string{}
	for _, name := range []string{"claim", "renew", "release"} {
		src, ok := redislease.Source(name)
		if !ok {
			return nil, fmt.Errorf("BUG: lease/redis has no script %q", name)
		}
		sha, err := c.Do(ctx, c.B().ScriptLoad().Script(src).Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("SCRIPT LOAD %s.lua: %w", name, err)
		}
		shas[name] = sha
	}
	return shas, nil
}

// refTask is the task redis-benchmark substitutes for "t:__rand_int__".
func refTask(i int) string { return fmt.Sprintf("t:%012d", i) }

// checkRefCalls sends each reference command once, its task the first of
// its space, and fails unless the script did its whole work (a claim
// claimed, a renewal renewed, a release released): a reference whose keys
// or arguments drifted from the backend's fails here instead of timing an
// error or a miss. It leaves leases behind; the caller drops them.
func checkRefCalls(ctx context.Context, c rueidis.Client, l lease.Leases, calls []refCall) error {
	if err := fillLeases(ctx, l, 1); err != nil {
		return err
	}
	for _, rc := range calls {
		argv := make([]string, len(rc.argv))
		for i, a := range rc.argv {
			argv[i] = strings.ReplaceAll(a, "__rand_int__", fmt.Sprintf("%012d", 0))
		}
		m := c.Do(ctx, c.B().Arbitrary(argv...).Build())
		ok, err := refDone(rc.script, m)
		if err == nil && !ok {
			v, _ := m.ToAny()
			err = fmt.Errorf("the script answered %v instead of doing its work", v)
		}
		if err != nil {
			return fmt.Errorf("the redis-benchmark reference %s is broken: %s: %w; "+
				"its KEYS and ARGV must be those lease/redis passes (bench/claims_ref.go refCalls)",
				rc.script, strings.Join(argv, " "), err)
		}
	}
	return nil
}

// refDone reads a script's answer: whether it did its whole work.
func refDone(script string, m rueidis.RedisResult) (bool, error) {
	switch script {
	case "claim":
		res, err := m.ToArray()
		if err != nil || len(res) == 0 {
			return false, err
		}
		code, err := res[0].AsInt64()
		return code == 1, err
	case "renew":
		got, err := m.AsIntSlice()
		return len(got) == 1 && got[0] == 1, err
	case "release":
		n, err := m.AsInt64()
		return n == 1, err
	}
	return false, fmt.Errorf("BUG: no reference check for script %q", script)
}

// fillLeases leases tasks refTask(0..n-1) to refWorker with token refFence
// through the backend's Restore, for longer than any reference run lasts.
func fillLeases(ctx context.Context, l lease.Leases, n int) error {
	const workers = 64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += workers {
				errs[w] = l.Restore(ctx, refTask(i), refWorker, refFence, 10*leaseTTL)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("cannot lease the reference's tasks: %w", err)
		}
	}
	return nil
}

// leaseCount is the number of leases under prefix (the leases hash's size).
func leaseCount(ctx context.Context, c rueidis.Client, prefix string) (int64, error) {
	return c.Do(ctx, c.B().Hlen().Key(rediskey.Key(prefix, rediskey.Leases)).Build()).AsInt64()
}
