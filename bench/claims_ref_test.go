package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	redislease "github.com/rlsched/rlsched/lease/redis"
)

// The reference commands must do what the backend's calls do; a command
// with the keys of an older script (claim and release once had fewer) must
// fail the check rather than be timed.
func TestCheckRefCalls(t *testing.T) {
	addr := testsvc.RequireRedis(t)
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatalf("cannot connect to redis at %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	prefix := fmt.Sprintf("bench-claims-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(c, prefix) })
	l, err := redislease.New(ctx, c, redislease.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	shas, err := loadRefScripts(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	calls := refCalls(prefix, shas, 10)

	f := func(name string, calls []refCall, wantErr string) {
		t.Helper()
		dropPrefix(c, prefix)
		err := checkRefCalls(ctx, c, l, calls)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: got %v, want an error with %q", name, err, wantErr)
		}
	}
	f("the reference", calls, "")

	// claim with 3 keys: give_back reads a nil KEYS[4].
	short := slices.Clone(calls)
	claim := short[0]
	claim.argv = append([]string{"EVALSHA", shas["claim"], "3"}, claim.argv[3:6]...)
	claim.argv = append(claim.argv, calls[0].argv[8:]...)
	short[0] = claim
	f("claim with 3 keys", short, "reference claim is broken")

	// release with the wrong token: the script answers 0, a miss.
	miss := slices.Clone(calls)
	release := miss[2]
	release.argv = append(slices.Clone(release.argv[:len(release.argv)-1]), "2")
	miss[2] = release
	f("release with another token", miss, "instead of doing its work")
}
