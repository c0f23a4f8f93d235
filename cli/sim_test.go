package cli

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

const simData = "../sim/testdata/"

func TestSim_TablePerPolicyAndSkippedJobs(t *testing.T) {
	h := newHarness(t)
	csvPath := filepath.Join(t.TempDir(), "jobs.csv")
	plots := filepath.Join(t.TempDir(), "plots")
	out, _ := h.mustRun(0, "sim", "--cluster", simData+"cluster.json", "--trace", simData+"helios_venus_cluster_log.csv",
		"--format", "helios", "--policy", "rlsched", "--policy", "hl1:halflife=1h,reserve=off", "--policies", "sjf,tiresias", "--jobs-csv", csvPath, "--plot", plots)
	for _, want := range []string{
		"helios trace: 6 jobs on 6 workers, 40 GPUs",
		"5476: its duration is negative",
		"5475: needs 16 GPUs on one worker",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^\s+policy\s+rlsched\s+hl1\s+sjf\s+tiresias$`).MatchString(out) || !regexp.MustCompile(`(?m)^\s+jobs finished\s+5\s+5\s+5\s+5$`).MatchString(out) {
		t.Errorf("table:\n%s", out)
	}
	for _, name := range []string{"jct_cdf.svg", "utilisation.svg", "user_wait.svg"} {
		b, err := os.ReadFile(filepath.Join(plots, name))
		if err != nil || !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "tiresias") {
			t.Errorf("%s: %d bytes, %v", name, len(b), err)
		}
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 1+4*5 {
		t.Errorf("jobs CSV: %d rows, %v", len(rows), err)
	}
}

func TestSim_JSONFromALiveMaster(t *testing.T) {
	h := newHarness(t)
	h.login()
	out, _ := h.mustRun(0, "sim", "--from", h.f.url(), "--trace", "jobs=50,users=3,span=10h", "--format", "synthetic",
		"--policy", "fifo", "--checkpoint-every", "10m", "--json")
	var ans simJSON
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	// The fake master lists w1 (2 GPUs), w2, DOWN, and w3, silent (no
	// GPUs): w1 and w3 are simulated, and the synthetic trace's 4- and
	// 8-GPU jobs fit nowhere.
	if ans.Cluster.Workers != 2 || ans.Cluster.GPUs != 2 || len(ans.Policies) != 1 || ans.Policies[0].Policy != "fifo" {
		t.Fatalf("json %+v", ans)
	}
	p := ans.Policies[0]
	if p.Jobs == 0 || p.Jobs+len(p.NotRun) != 50 || !strings.Contains(p.NotRun[0].Reason, "no worker has that many") {
		t.Errorf("%d finished, not run %v", p.Jobs, p.NotRun)
	}
}

func TestSim_UsageErrors(t *testing.T) {
	h := newHarness(t)
	f := func(want string, args ...string) {
		t.Helper()
		_, errs := h.mustRun(ExitUsage, append([]string{"sim"}, args...)...)
		if !strings.Contains(errs, want) {
			t.Errorf("%v: stderr %q, want %q", args, errs, want)
		}
	}
	f("one of --cluster", "--trace", "x", "--format", "helios")
	f("one of --cluster", "--cluster", "a", "--from", "b", "--trace", "x", "--format", "helios")
	f("--format is required", "--cluster", "a", "--trace", "x")
	f("unknown --format", "--cluster", simData+"cluster.json", "--trace", "x", "--format", "slurm")
	f("bad policy", "--cluster", "a", "--trace", "x", "--format", "helios", "--policy", "x:what=1")
	f("bad synthetic spec", "--cluster", simData+"cluster.json", "--trace", "jobs=-4", "--format", "synthetic")
	_, errs := h.mustRun(ExitError, "sim", "--cluster", simData+"helios_venus_cluster_log.csv", "--trace", "x", "--format", "helios")
	if !strings.Contains(errs, "cannot read the cluster file") {
		t.Errorf("a CSV as the cluster: %q", errs)
	}
	_, errs = h.mustRun(ExitError, "sim", "--cluster", simData+"cluster.json", "--trace", simData+"cluster.json", "--format", "helios")
	if !strings.Contains(errs, "cannot read the Helios trace") {
		t.Errorf("JSON as a Helios trace: %q", errs)
	}
}

func TestSim_HistoryOfTheMaster(t *testing.T) {
	h := newHarness(t)
	h.login()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) *time.Time { x := t0.Add(time.Duration(m) * time.Minute); return &x }
	h.f.mu.Lock()
	for _, tk := range []core.Task{
		{ID: "r1", User: "alice", GPUs: 2, CreatedAt: *at(0), StartedAt: at(1), FinishedAt: at(61), Status: core.StatusSucceeded},
		{ID: "r2", User: "bob", GPUs: 2, CreatedAt: *at(1), StartedAt: at(61), FinishedAt: at(91), Status: core.StatusSucceeded},
		{ID: "r3", User: "bob", GPUs: 1, CreatedAt: *at(2), Status: core.StatusQueued},
	} {
		h.f.tasks[tk.ID] = &tk
		h.f.order = append(h.f.order, tk.ID)
	}
	h.f.mu.Unlock()
	out, _ := h.mustRun(0, "sim", "--from", h.f.url(), "--trace", "history", "--policy", "rlsched", "--json")
	var ans simJSON
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	// The fake master's one live worker has 2 GPUs: r2 waits for r1 (from 1 to 60 min; r1
	// starts at once here, a minute earlier than it did) and ends at 90.
	if ans.Trace.Format != "history" || ans.Trace.Jobs != 2 || len(ans.Trace.Skipped) != 1 || ans.Trace.Skipped[0].ID != "r3" {
		t.Fatalf("trace %+v", ans.Trace)
	}
	if p := ans.Policies[0]; p.Jobs != 2 || p.Wait.Max != 59*60 || p.Makespan != 90*60 {
		t.Errorf("summary %+v", p.Summary)
	}
}
