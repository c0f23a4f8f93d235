package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// The scheduling policy through a real master and the CLI: a user's
// priority above 0 is refused, an admin's is served first and can be
// changed while queued, `rlsched queue` shows the serving order with each
// run's reason, `rlsched quota set/ls` caps a user and shows it.
func TestPolicyQueueAndQuotaCLI(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	anon := newClient(t, m.URL)
	anon.Register("root")
	anon.Register("alice")
	root, alice := anon.login("root"), anon.login("alice")

	if r, _ := alice.Do("POST", "/api/train", map[string]any{"command": []string{"true"}, "priority": 3}); r.Status != 403 {
		t.Fatalf("a user's priority 3: %s", r)
	}
	var a1, a2, urgent struct {
		ID string `json:"id"`
	}
	alice.Must("POST", "/api/train", map[string]any{"command": []string{"true"}, "gpus": 1}, 202, &a1)
	alice.Must("POST", "/api/train", map[string]any{"command": []string{"true"}, "gpus": 1}, 202, &a2)
	root.Must("POST", "/api/train", map[string]any{"command": []string{"true"}, "gpus": 1, "priority": 5}, 202, &urgent)
	root.Must("POST", "/api/tasks/"+a2.ID+"/priority", map[string]any{"priority": 7}, 200, nil)
	if r, _ := alice.Do("POST", "/api/tasks/"+a1.ID+"/priority", map[string]any{"priority": 9}); r.Status != 403 {
		t.Fatalf("a user changes a priority: %s", r)
	}

	cfg := filepath.Join(b.Dir, "cli-root")
	cli := func(cfg string, want int, args ...string) string {
		t.Helper()
		out, code := b.cli(cfg, append(args, "--server", m.URL)...)
		if code != want {
			t.Fatalf("rlsched %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli(cfg, 0, "login", "-u", "root", "-p", rig.Password)
	out := cli(cfg, 0, "queue")
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "POS") {
		t.Fatalf("queue:\n%s", out)
	}
	for i, id := range []string{a2.ID, urgent.ID, a1.ID} { // 7, 5, 0
		if !regexp.MustCompile(`^` + string(rune('1'+i)) + `\s+` + id + `\s+\S+\s+1\s+\d+\s+\S+\s+no_worker\s+no worker is connected$`).MatchString(lines[i+1]) {
			t.Errorf("queue line %d: %q, want %s", i+1, lines[i+1], id)
		}
	}

	if out := cli(cfg, 0, "quota", "set", "alice", "--gpus", "2", "--runs", "none"); strings.TrimSpace(out) != "alice: GPUs 2, runs no cap" {
		t.Fatalf("quota set: %q", out)
	}
	out = cli(cfg, 0, "quota", "ls")
	if !regexp.MustCompile(`(?m)^alice\s+0\.00\s+0\s+0\s+2\s+-$`).MatchString(out) {
		t.Fatalf("quota ls:\n%s", out)
	}
	cli(cfg, 2, "quota", "set", "alice")
	acfg := filepath.Join(b.Dir, "cli-alice")
	cli(acfg, 0, "login", "-u", "alice", "-p", rig.Password)
	if out := cli(acfg, 1, "quota", "set", "alice", "--gpus", "9"); !strings.Contains(out, "admin") {
		t.Fatalf("a user's quota set: %s", out)
	}
	id := strings.TrimSpace(cli(acfg, 0, "submit", "--gpus", "1", "--preemptible", "--grace", "60", "--", "true"))
	var p struct {
		Preemptible bool `json:"preemptible"`
		Grace       int  `json:"preemptGraceSeconds"`
	}
	alice.Must("GET", "/api/tasks/"+id, nil, 200, &p)
	if !p.Preemptible || p.Grace != 60 {
		t.Fatalf("submit --preemptible --grace 60 gave %+v", p)
	}
	cli(acfg, 2, "submit", "--grace", "601", "--", "true")
}

// A preemptible scripts/train.py run on the only GPU is preempted for an
// admin's priority-5 run: it gets SIGTERM, checkpoints, is QUEUED again with
// attempt 2 (not a retry: maxRetries 0), the urgent run takes the GPU, and
// the next attempt logs "resumed from episode K".
func TestPreemptionResumesFromCheckpoint(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1", GPUs: 1, Env: []string{"ARTIFACT_SYNC_SECONDS=1"}})
	m.WaitJoined(t, "w1")
	anon := newClient(t, m.URL)
	anon.Register("root")
	anon.Register("alice")
	root, alice := anon.login("root"), anon.login("alice")

	var victim, urgent struct {
		ID string `json:"id"`
	}
	alice.Must("POST", "/api/train", map[string]any{"algorithm": "REINFORCE", "episodes": 1000000, "gpus": 1,
		"maxRetries": 0, "preemptible": true, "preemptGraceSeconds": 30}, 202, &victim)
	alice.waitLogContains(victim.ID, "RLSCHED_METRIC", 60*time.Second)
	root.Must("POST", "/api/train", map[string]any{"command": []string{"sleep", "1"}, "gpus": 1, "priority": 5}, 202, &urgent)

	defer func() {
		if t.Failed() {
			for _, l := range strings.Split(m.Stderr(), "\n") {
				if strings.Contains(l, "preempt") || strings.Contains(l, "cannot") || strings.Contains(l, "error") {
					t.Log(l)
				}
			}
		}
	}()
	alice.waitTask(victim.ID, 60*time.Second, "preempted: QUEUED again with attempt 2", func(tk task) bool {
		return tk.Attempt >= 2
	})
	root.waitStatus(urgent.ID, "SUCCEEDED", 60*time.Second)
	alice.waitLogContains(victim.ID, "resumed from episode", 60*time.Second)
	text, err := alice.logText(victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`received SIGTERM after \d+ episodes; checkpoint saved`).MatchString(text) ||
		!regexp.MustCompile(`resumed from episode [1-9]\d*`).MatchString(text) {
		t.Fatalf("the victim's log:\n%s", text)
	}
	var v struct {
		Preemptions int     `json:"preemptions"`
		PreemptedAt *string `json:"preemptedAt"`
		MaxRetries  int     `json:"maxRetries"`
	}
	alice.Must("GET", "/api/tasks/"+victim.ID, nil, 200, &v)
	if v.Preemptions != 1 || v.PreemptedAt == nil || v.MaxRetries != 0 {
		t.Fatalf("the victim: %+v", v)
	}
	alice.Must("POST", "/api/tasks/"+victim.ID+"/cancel", nil, 202, nil)
}

// Two masters on MySQL and Redis and 200 runs of bob submitted at once
// through both; then a worker with 8 slots joins each master at the same
// moment, so both plan from the same store counts: his quota of 3 active
// runs holds across the masters (their claims charge the quota in the
// Redis claim script), and it is reached.
func TestQuotaAcrossTwoMasters(t *testing.T) {
	b := newBed(t)
	env := mmBackends(t, b, "")
	ms := b.mmStartMasters(2, env)
	root, _ := signup(t, ms[0].URL, "root", "ADMIN")
	newClient(t, ms[0].URL).Register("bob")
	bobs := []*client{newClient(t, ms[0].URL).login("bob"), newClient(t, ms[1].URL).login("bob")}
	root.Must("PUT", "/api/admin/quotas/bob", map[string]any{"runs": 3}, 200, nil)

	errs := make(chan error, 200)
	for i := range 200 {
		go func() {
			r, err := bobs[i%2].Do("POST", "/api/train", map[string]any{"command": []string{"sleep", "60"}})
			if err == nil && r.Status != 202 {
				err = fmt.Errorf("submit: %s", r)
			}
			errs <- err
		}()
	}
	for range 200 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	b.StartWorker("worker-w1", mmRPCList(ms, 0), rig.WorkerOpts{ID: "w1", Slots: 8})
	b.StartWorker("worker-w2", mmRPCList(ms, 1), rig.WorkerOpts{ID: "w2", Slots: 8})
	active := func() int {
		var u struct {
			Items []struct {
				User        string `json:"user"`
				RunningRuns int    `json:"runningRuns"`
			} `json:"items"`
		}
		root.Must("GET", "/api/users/usage", nil, 200, &u)
		for _, it := range u.Items {
			if it.User == "bob" {
				return it.RunningRuns
			}
		}
		return -1
	}
	most := 0
	// Not a wait: the quota must hold at every sample over the whole 20 s
	// (the runs come and go meanwhile), so the loop runs its full length.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n := active()
		if n > 3 {
			t.Fatalf("bob has %d runs active with a quota of 3", n)
		}
		most = max(most, n)
	}
	if most != 3 {
		t.Fatalf("bob's runs never reached his quota of 3 (at most %d active)", most)
	}
}

// Fair share on one worker with 2 GPUs: Alice queues 20 one-GPU runs, then
// Bob 2. At equal priority Bob has used less, so his runs take the next
// GPUs that free: no more of Alice's runs start before both of his.
func TestFairShareTwoUsers(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1", GPUs: 2})
	m.WaitJoined(t, "w1")
	anon := newClient(t, m.URL)
	anon.Register("alice")
	anon.Register("bob")
	alice, bob := anon.login("alice"), anon.login("bob")
	submit := func(c *client) string {
		var s struct {
			ID string `json:"id"`
		}
		c.Must("POST", "/api/train", map[string]any{"command": []string{"sleep", "2"}, "gpus": 1}, 202, &s)
		return s.ID
	}
	var aliceRuns []string
	for range 20 {
		aliceRuns = append(aliceRuns, submit(alice))
	}
	b1, b2 := submit(bob), submit(bob)
	started := func(c *client, id string) time.Time {
		var tk struct {
			StartedAt *time.Time `json:"startedAt"`
		}
		c.Must("GET", "/api/tasks/"+id, nil, 200, &tk)
		if tk.StartedAt == nil {
			return time.Time{}
		}
		return *tk.StartedAt
	}
	bob.waitStatus(b1, "SUCCEEDED", 60*time.Second)
	bob.waitStatus(b2, "SUCCEEDED", 60*time.Second)
	last := started(bob, b1)
	if s := started(bob, b2); s.After(last) {
		last = s
	}
	before := 0
	for _, id := range aliceRuns {
		if s := started(alice, id); !s.IsZero() && s.Before(last) {
			before++
		}
	}
	if before > 2 {
		t.Fatalf("%d of Alice's runs started before both of Bob's; want at most the 2 that held the GPUs when he submitted", before)
	}
}

// INTERACTIVE_PREEMPTS (issue 34): with it on, a session that needs the
// only GPU preempts a preemptible batch run of its own priority (QUEUED
// again, attempt 2) and starts; a batch run of that priority does not.
func TestInteractivePreemptsBatch(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data"), Env: []string{"INTERACTIVE_PREEMPTS=true"}})
	b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1", GPUs: 1})
	m.WaitJoined(t, "w1")
	anon := newClient(t, m.URL)
	anon.Register("root")
	anon.Register("alice")
	root, alice := anon.login("root"), anon.login("alice")

	var victim, peer, sess struct {
		ID string `json:"id"`
	}
	root.Must("POST", "/api/train", map[string]any{"command": []string{"sleep", "600"}, "gpus": 1,
		"preemptible": true, "preemptGraceSeconds": 1}, 202, &victim)
	root.waitStatus(victim.ID, "RUNNING", 60*time.Second)
	// A batch run of the same priority waits.
	root.Must("POST", "/api/train", map[string]any{"command": []string{"true"}, "gpus": 1}, 202, &peer)
	alice.Must("POST", "/api/train", map[string]any{"kind": "interactive", "command": []string{"sleep", "600"}, "gpus": 1}, 202, &sess)
	defer func() {
		if t.Failed() {
			for _, l := range strings.Split(m.Stderr(), "\n") {
				if strings.Contains(l, "preempt") || strings.Contains(l, "dispatched") {
					t.Log(l)
				}
			}
		}
	}()
	alice.waitStatus(sess.ID, "RUNNING", 60*time.Second)
	v := root.waitTask(victim.ID, 30*time.Second, "preempted: attempt 2", func(tk task) bool { return tk.Attempt >= 2 })
	if v.Status == "RUNNING" && v.Attempt == 2 {
		t.Fatalf("the victim runs again beside the session on the only GPU: %+v", v)
	}
	if p, _ := root.getTask(peer.ID); p.Status != "QUEUED" {
		t.Fatalf("the batch run of the same priority is %s, want QUEUED behind the session", p.Status)
	}
	alice.Must("POST", "/api/tasks/"+sess.ID+"/cancel", nil, 202, nil)
	root.Must("POST", "/api/tasks/"+victim.ID+"/cancel", nil, 202, nil)
}
