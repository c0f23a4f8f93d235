package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestCancelKillsProcessGroup: cancel stops the whole process group of a
// run (SIGTERM, then SIGKILL after the grace period), the run ends
// CANCELLED, only its owner or an admin may cancel it, and a finished run
// cannot be cancelled again.
func TestCancelKillsProcessGroup(t *testing.T) {
	b := newBed(t)
	up := b.startUp("up", filepath.Join(b.Dir, "data"))
	alice, _ := signup(t, up.URL, "alice", "ADMIN")
	bob, _ := signup(t, up.URL, "bob", "USER")
	grace := time.Duration(cancelGraceSeconds) * time.Second

	// A: alice's sleep, which dies on SIGTERM.
	a, _ := b.submit(alice, map[string]any{"command": []string{"sleep", "600"}})
	// B: bob's shell ignoring SIGTERM, with a child that ignores it too: only
	// the SIGKILL after the grace period, sent to the group, ends both.
	bID, _ := b.submit(bob, map[string]any{"command": []string{"sh", "-c", "trap '' TERM; sleep 600 & sleep 600; wait"}})

	alice.waitStatus(a, "RUNNING", 30*time.Second)
	pa := waitRunProcs(t, a, 1, 10*time.Second)
	pgA := pa[0].pgid

	// Not the owner, not an admin: 403, and the run keeps running.
	r, err := bob.Do("POST", "/api/tasks/"+a+"/cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, "bob cancels alice's run", r, 403, "forbidden")
	if groupGone(pgA) {
		t.Fatalf("run %s died after a refused cancel", a)
	}

	var cancelled task
	alice.Must("POST", "/api/tasks/"+a+"/cancel", nil, 202, &cancelled)
	if cancelled.ID != a {
		t.Errorf("cancel answered run %q, want %s", cancelled.ID, a)
	}
	start := time.Now()
	testutil.Eventually(t, grace+2*time.Second, func() (bool, string) {
		return groupGone(pgA), fmt.Sprintf("process group %d of run %s still alive", pgA, a)
	})
	t.Logf("run %s (sleep) gone %v after cancel", a, time.Since(start).Round(time.Millisecond))
	tk := alice.waitStatus(a, "CANCELLED", 10*time.Second)
	if tk.Attempt != 1 {
		t.Errorf("cancelled run: %v; want attempt 1", tk)
	}
	r, err = alice.Do("POST", "/api/tasks/"+a+"/cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, "cancel a cancelled run", r, 409, "conflict")

	// B: an admin may cancel anybody's run; the group dies only by SIGKILL.
	bob.waitStatus(bID, "RUNNING", 30*time.Second)
	pb := waitRunProcs(t, bID, 3, 10*time.Second) // sh and its two sleeps
	pgB := pb[0].pgid
	alice.Must("POST", "/api/tasks/"+bID+"/cancel", nil, 202, nil)
	start = time.Now()
	testutil.Eventually(t, grace+2*time.Second, func() (bool, string) {
		return groupGone(pgB), fmt.Sprintf("process group %d of run %s (ignoring SIGTERM) still alive", pgB, bID)
	})
	took := time.Since(start)
	t.Logf("run %s (ignoring SIGTERM) gone %v after cancel", bID, took.Round(time.Millisecond))
	if took < grace/2 {
		t.Errorf("a run ignoring SIGTERM died %v after cancel; want SIGKILL only after the %v grace", took, grace)
	}
	tk = bob.waitStatus(bID, "CANCELLED", 10*time.Second)
	r, err = bob.Do("POST", "/api/tasks/"+bID+"/cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, "cancel a cancelled run (owner)", r, 409, "conflict")
	// Bob still may not cancel alice's (finished) run.
	r, err = bob.Do("POST", "/api/tasks/"+a+"/cancel", nil)
	if err != nil {
		t.Fatal(err)
	}
	checkError(t, "bob cancels alice's finished run", r, 403, "forbidden")
}
