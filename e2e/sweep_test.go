package e2e

import (
	"encoding/csv"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// TestSweepCLI is issue 17's "Done when" through the CLI against `rlsched
// up`: `rlsched sweep --grid lr=... --seeds 3 --wait` runs the cells of the
// default trainer, `sweep show` prints mean ± std per group, and `sweep
// retry` reruns exactly the members that failed (lr=-1: train.py refuses it).
func TestSweepCLI(t *testing.T) {
	b := newBed(t)
	up := b.startUp("up", filepath.Join(b.Dir, "data"))
	admin, _ := signup(t, up.URL, "alice", "ADMIN")
	cfg := filepath.Join(b.Dir, "cli-config")
	cli := func(want int, args ...string) string {
		t.Helper()
		out, code := b.cli(cfg, append(args, "--server", up.URL)...)
		if code != want {
			t.Fatalf("rlsched %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli(0, "register", "-u", "bob", "-p", rig.Password)
	cli(0, "login", "-u", "bob", "-p", rig.Password)

	// Exit 1: the lr=-1 members fail; the others succeed.
	out := cli(1, "sweep", "--grid", "lr=0.01,-1", "--seeds", "3", "--algorithm", "REINFORCE", "--episodes", "20",
		"--name", "lrs", "--wait")
	id := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	if !strings.HasPrefix(id, "s") || !strings.Contains(out, "sweep "+id+": 3 of 6 members SUCCEEDED, 3 did not") ||
		!strings.Contains(out, "0/6 done") {
		t.Fatalf("sweep --wait:\n%s", out)
	}
	var sw struct {
		Runs []task `json:"runs"`
	}
	admin.Must("GET", "/api/sweeps/"+id, nil, 200, &sw)
	for _, r := range sw.Runs {
		b.track(r.ID)
	}
	if len(sw.Runs) != 6 {
		t.Fatalf("%d members, want 6", len(sw.Runs))
	}
	out = cli(0, "sweep", "show", id)
	good := regexp.MustCompile(`(?m)^0\.01\s+-?[0-9.e+-]+ ± [0-9.e+-]+\s+3\s+\S+\s+\S+\s+3 SUCCEEDED$`)
	bad := regexp.MustCompile(`(?m)^-1\s+-\s+0\s+-\s+-\s+3 FAILED$`)
	if !strings.Contains(out, "lrs by bob, 6 members: 3 done, 0 running, 0 queued, 3 failed") || !good.MatchString(out) || !bad.MatchString(out) {
		t.Fatalf("sweep show:\n%s", out)
	}

	out = cli(1, "sweep", "retry", id, "--wait")
	retried := regexp.MustCompile(`(?m)^r[0-9a-f]+$`).FindAllString(out, -1)
	if len(retried) != 3 || !strings.Contains(out, "3 members rerun") {
		t.Fatalf("sweep retry --wait:\n%s", out)
	}
	failed := map[string]bool{}
	for _, r := range sw.Runs[3:] { // members 3..5 are lr=-1
		failed[r.ID] = true
	}
	for _, r := range retried {
		b.track(r)
		var tk struct {
			RerunOf string `json:"rerunOf"`
			SweepID string `json:"sweepId"`
			Status  string `json:"status"`
		}
		admin.Must("GET", "/api/tasks/"+r, nil, 200, &tk)
		if !failed[tk.RerunOf] || tk.SweepID != id || tk.Status != "FAILED" {
			t.Fatalf("retried run %s: %+v, want a FAILED rerun of an lr=-1 member", r, tk)
		}
		delete(failed, tk.RerunOf)
	}
	out = cli(0, "ls", "--sweep", id, "--csv", "--all")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 10 || strings.Join(rows[0][9:], ",") != "lr,seed" {
		t.Fatalf("ls --sweep --csv: %v\n%s", err, out)
	}
}
