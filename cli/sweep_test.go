package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/httpapi"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep/reference"
)

// storeControl cancels in the store, as the dispatcher does for a run no
// worker holds.
type storeControl struct {
	nopControl
	st store.Store
}

func (c storeControl) Cancel(ctx context.Context, id string) (core.Task, error) {
	t, err := c.st.Task(ctx, id)
	if err != nil || t.Status.Terminal() {
		return t, core.ErrConflict
	}
	exp := store.Expect{Fence: t.Fence, Status: t.Status}
	t.Status = core.StatusCancelled
	return t, c.st.UpdateTask(ctx, &t, exp)
}

// sweepHarness is the CLI against a real REST server, signed in as alice.
func sweepHarness(t *testing.T) (*harness, *realServer) {
	t.Helper()
	rs := newRealServerWith(t, false, func(st store.Store) httpapi.Control { return storeControl{st: st} })
	h := newHarness(t)
	h.vars["RLSCHED_SERVER"] = rs.url
	h.stdin = "password1\n"
	h.mustRun(0, "register", "-u", "alice", "--password-stdin")
	h.stdin = "password1\n"
	h.mustRun(0, "login", "-u", "alice", "--password-stdin")
	return h, rs
}

// end moves run id, however it stands, to st with reward (nil: none).
func end(t *testing.T, st store.Store, id string, to core.Status, reward *float64) {
	t.Helper()
	ctx := context.Background()
	tk, err := st.Task(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	tk.Status, tk.FinalReward = to, reward
	if err := st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
}

func members(t *testing.T, st store.Store, id string) []core.Task {
	t.Helper()
	ts, err := st.SweepRuns(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func TestSweep_CreateShowRetryCancel(t *testing.T) {
	h, rs := sweepHarness(t)
	out, errs := h.mustRun(0, "sweep", "--grid", "lr=0.1,0.2", "--seeds", "2", "--param", "gamma=0.99", "--max-parallel", "3",
		"--name", "lrs", "--tag", "mine", "--", "python3", "train.py")
	id := strings.TrimSpace(out)
	if !core.ValidTaskID(id) || !strings.Contains(errs, "4 runs queued") {
		t.Fatalf("stdout %q, stderr %q", out, errs)
	}
	ms := members(t, rs.st, id)
	if len(ms) != 4 {
		t.Fatalf("%d members", len(ms))
	}
	if tk := ms[3]; string(tk.Params) != `{"gamma":0.99,"lr":0.2,"seed":1}` || tk.Name != "lrs lr=0.2 seed=1" ||
		!reflect.DeepEqual(tk.Tags, []string{"mine", core.SweepTag(id)}) || tk.Workdir != h.env.Dir ||
		!reflect.DeepEqual(tk.Command, []string{"python3", "train.py", "--gamma", "0.99", "--lr", "0.2", "--seed", "1"}) {
		t.Fatalf("member 3: %+v", tk)
	}
	rewards := []float64{1, 3, 10, 20}
	for i, m := range ms {
		end(t, rs.st, m.ID, core.StatusSucceeded, &rewards[i])
	}
	end(t, rs.st, ms[1].ID, core.StatusFailed, nil)

	out, _ = h.mustRun(0, "sweep", "show", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], "sweep "+id+" lrs by alice, 4 members (at most 3 at once): 3 done, 0 running, 0 queued, 1 failed") ||
		!regexpMatch(`^GAMMA\s+LR\s+REWARD \(MEAN ± STD\)\s+N\s+MIN\s+MAX\s+RUNS$`, lines[2]) ||
		!regexpMatch(`^0\.99\s+0\.2\s+15 ± 7\.0711\s+2\s+10\s+20\s+2 SUCCEEDED$`, lines[3]) ||
		!regexpMatch(`^0\.99\s+0\.1\s+1 ± 0\s+1\s+1\s+1\s+1 SUCCEEDED, 1 FAILED$`, lines[4]) {
		t.Fatalf("sweep show:\n%s", out)
	}
	out, _ = h.mustRun(0, "sweep", "show", id, "--csv")
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 3 || rows[0][0] != "gamma" || rows[1][3] != "15" {
		t.Fatalf("sweep show --csv: %v\n%s", err, out)
	}
	out, _ = h.mustRun(0, "sweep", "show", id, "--json")
	if !strings.Contains(out, `"runs": [`) || !strings.Contains(out, `"groups"`) {
		t.Fatalf("sweep show --json:\n%s", out)
	}
	out, _ = h.mustRun(0, "sweep", "ls")
	if !regexpMatch(`(?m)^`+id+`\s+lrs\s+alice\s+4\s+3\s+0\s+0\s+1\s+\d+s$`, out) {
		t.Fatalf("sweep ls:\n%s", out)
	}

	out, errs = h.mustRun(0, "sweep", "retry", id)
	retried := strings.Fields(out)
	if len(retried) != 1 || !strings.Contains(errs, "1 members rerun") {
		t.Fatalf("sweep retry: %q %q", out, errs)
	}
	if tk, _ := rs.st.Task(context.Background(), retried[0]); tk.RerunOf != ms[1].ID {
		t.Fatalf("the retried run: %+v", tk)
	}
	if out, errs = h.mustRun(0, "sweep", "retry", id); out != "" || !strings.Contains(errs, "no member to retry") {
		t.Fatalf("a second retry: %q %q", out, errs)
	}
	if out, _ = h.mustRun(0, "sweep", "cancel", id); strings.TrimSpace(out) != retried[0] {
		t.Fatalf("sweep cancel: %q", out)
	}
	// Finding the members again with ls.
	out, _ = h.mustRun(0, "ls", "--sweep", id, "--param", "lr=0.2")
	if strings.Count(out, "\n") != 3 || !strings.Contains(out, ms[2].ID) || !strings.Contains(out, ms[3].ID) {
		t.Fatalf("ls --sweep --param:\n%s", out)
	}
	out, _ = h.mustRun(0, "ls", "--tag", "mine", "--name", "LR=0.1 SEED=1", "--csv")
	rows, err = csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 3 || strings.Join(rows[0][9:], ",") != "gamma,lr,seed" {
		t.Fatalf("ls --csv: %v\n%s", err, out)
	}
	for _, r := range rows[1:] {
		if r[10] != "0.1" || r[11] != "1" {
			t.Fatalf("ls --csv rows: %q", rows)
		}
	}
	if out, _ = h.mustRun(0, "ls", "--since", "1h", "--until", "2200-01-01"); strings.Count(out, "\n") != 6 {
		t.Fatalf("ls --since 1h:\n%s", out)
	}
	if out, errs := h.mustRun(0, "ls", "--since", "2200-01-01T00:00:00Z"); out != "" || !strings.Contains(errs, "no runs match") {
		t.Fatalf("ls --since 2200:\n%s%s", out, errs)
	}
	// Errors: the server's message names the field; usage errors exit 2.
	_, errs = h.mustRun(1, "sweep", "--random", "lr=loguniform:0:1", "--samples", "3", "--", "x")
	if !strings.Contains(errs, "random.lr.min") {
		t.Fatalf("loguniform from 0: %s", errs)
	}
	_, errs = h.mustRun(1, "sweep", "retry", "s-missing")
	if !strings.Contains(errs, "rlsched sweep ls") {
		t.Fatalf("retry of an unknown sweep: %s", errs)
	}
	h.mustRun(2, "sweep", "--", "x")
	h.mustRun(2, "sweep", "--seeds", "x", "--", "x")
	h.mustRun(2, "sweep", "--grid", "lr", "--", "x")
	h.mustRun(2, "sweep", "--random", "lr=normal:0:1", "--", "x")
	h.mustRun(2, "sweep", "show")
	h.mustRun(2, "sweep", "show", "bad id")
	h.mustRun(2, "ls", "--since", "yesterday")
}

// Another user's sweep: show works, retry and cancel are refused.
func TestSweep_OtherUser(t *testing.T) {
	h, _ := sweepHarness(t)
	out, _ := h.mustRun(0, "sweep", "--seeds", "3,7", "--", "x")
	id := strings.TrimSpace(out)
	h.mustRun(0, "logout")
	h.stdin = "password2\n"
	h.mustRun(0, "register", "-u", "bob", "--password-stdin")
	h.stdin = "password2\n"
	h.mustRun(0, "login", "-u", "bob", "--password-stdin")
	h.mustRun(0, "sweep", "show", id)
	for _, sub := range []string{"retry", "cancel"} {
		_, errs := h.mustRun(1, "sweep", sub, id)
		if !strings.Contains(errs, "HTTP 403") || !strings.Contains(errs, "owner of a sweep") {
			t.Fatalf("bob's sweep %s: %s", sub, errs)
		}
	}
}

// --wait shows done/running/queued/failed as the members move, then the
// groups; it exits 0 only when every member SUCCEEDED.
func TestSweep_Wait(t *testing.T) {
	for _, last := range []core.Status{core.StatusSucceeded, core.StatusFailed} {
		t.Run(string(last), func(t *testing.T) {
			h, rs := sweepHarness(t)
			h.env.waitEvery = 20 * time.Millisecond
			// The members move on while the CLI waits, a step each time the
			// CLI has polled twice since the last (the server's access log
			// counts its GETs of the sweep): the first runs and ends, then
			// the second.
			polls := func() int { return strings.Count(rs.access.String(), `"path":"/api/sweeps/s`) }
			var wg sync.WaitGroup
			stop := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ms []core.Task
				for len(ms) == 0 {
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
					sws, _, _ := rs.st.ListSweeps(context.Background(), store.SweepFilter{})
					if len(sws) == 1 {
						ms = members(t, rs.st, sws[0].ID)
					}
				}
				r := 1.0
				steps := []struct {
					i  int
					to core.Status
				}{{0, core.StatusRunning}, {0, core.StatusSucceeded}, {1, core.StatusRunning}, {1, last}}
				for _, s := range steps {
					for seen := polls(); polls() < seen+2; {
						select {
						case <-stop:
							return
						case <-time.After(5 * time.Millisecond):
						}
					}
					end(t, rs.st, ms[s.i].ID, s.to, &r)
				}
			}()
			want := 0
			if last != core.StatusSucceeded {
				want = 1
			}
			out, errs := h.mustRun(want, "sweep", "--seeds", "2", "--wait", "--", "x")
			close(stop)
			wg.Wait()
			id := strings.TrimSpace(out)
			for _, line := range []string{
				fmt.Sprintf("sweep %s: 0/2 done · 0 running · 2 queued · 0 failed", id),
				fmt.Sprintf("sweep %s: 1/2 done · 0 running · 1 queued · 0 failed", id),
				fmt.Sprintf("sweep %s: 1/2 done · 1 running · 0 queued · 0 failed", id),
				"REWARD (MEAN ± STD)",
			} {
				if !strings.Contains(errs, line) {
					t.Errorf("stderr lacks %q:\n%s", line, errs)
				}
			}
			if strings.Contains(errs, "\r") {
				t.Errorf("redraws without a terminal:\n%q", errs)
			}
			// The final table counts the members as they ended, not the
			// polls' statuses added up (issue 32: "3 QUEUED, 2 RUNNING, 3
			// SUCCEEDED" for a group of 3).
			_, final, _ := strings.Cut(errs, "members SUCCEEDED")
			if strings.Contains(final, "QUEUED") || strings.Contains(final, "RUNNING") || !strings.Contains(final, "SUCCEEDED") {
				t.Errorf("the final table has stale counts:\n%s", final)
			}
			if want == 1 && !strings.Contains(errs, "rlsched sweep retry "+id) {
				t.Errorf("no retry hint:\n%s", errs)
			}
		})
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

// TestSweep_SearchFlagsAndShow: --method tpe --budget --early-stop reach
// the server (a tpe sweep starts with its first proposals), a bad rung is
// the server's 400 naming the field, and `sweep show` gives the best, the
// stops and the members that never reported.
func TestSweep_SearchFlagsAndShow(t *testing.T) {
	h, rs := sweepHarness(t)
	out, errs := h.mustRun(0, "sweep", "--method", "tpe", "--budget", "4", "--max-parallel", "2",
		"--random", "lr=loguniform:1e-4:1e-1", "--early-stop", "asha", "--rungs", "10,30", "--reduction-factor", "2",
		"--name", "search", "--", "python3", "train.py")
	id := strings.TrimSpace(out)
	if !strings.Contains(errs, "2 runs queued") {
		t.Fatalf("stdout %q, stderr %q; want the first 2 proposals queued", out, errs)
	}
	_, errs = h.mustRun(1, "sweep", "--method", "tpe", "--budget", "4", "--random", "lr=uniform:0:1",
		"--early-stop", "asha", "--rungs", "30,10", "--", "python3", "train.py")
	if !strings.Contains(errs, "earlyStop.rungs[1]") {
		t.Fatalf("rungs not increasing: stderr %q; want the field named", errs)
	}
	_, errs = h.mustRun(2, "sweep", "--random", "lr=uniform:0:1", "--samples", "2", "--rungs", "10", "--", "python3", "train.py")
	if !strings.Contains(errs, "--early-stop") {
		t.Fatalf("--rungs without --early-stop: stderr %q", errs)
	}
	ms := members(t, rs.st, id)
	ctx := context.Background()
	for i, m := range ms {
		if err := rs.st.AppendMetrics(ctx, m.ID, []core.MetricPoint{{Step: 10, Name: "episode_reward", Value: float64(10 * (i + 1))}}); err != nil {
			t.Fatal(err)
		}
	}
	end(t, rs.st, ms[1].ID, core.StatusSucceeded, nil)
	tk, err := rs.st.Task(ctx, ms[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	tk.Status, tk.Reason, tk.Error = core.StatusCancelled, core.ReasonEarlyStopped, "stopped at rung 1 (step 10): episode_reward 10 below the cut 20 of 2 members"
	if err := rs.st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
	ds := []store.SweepDecision{{TaskID: ms[1].ID, Rung: 0, Step: 10, Value: 20, Cut: 20, Peers: 1},
		{TaskID: ms[0].ID, Rung: 0, Step: 10, Value: 10, Cut: 20, Peers: 2, Stop: true, DecidedAt: time.Unix(0, 1)}}
	if err := rs.st.KeepSweepDecisions(ctx, id, ds); err != nil {
		t.Fatal(err)
	}
	out, _ = h.mustRun(0, "sweep", "show", id)
	for _, want := range []string{
		"tpe search of episode_reward: 2 of 4 members proposed",
		"2 members (at most 2 at once): 1 done, 0 running, 0 queued, 0 failed, 1 stopped early\n",
		"rung 1 (step 10): 1 continued, 1 stopped; last cut 20\n",
		"best episode_reward: {\"lr\":",
		"20 [20, 20] (runs " + ms[1].ID + ")",
		"stopped early:\n  " + ms[0].ID + "  stopped at rung 1 (step 10): episode_reward 10 below the cut 20 of 2 members",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep show lacks %q:\n%s", want, out)
		}
	}
}

// TestSweep_Heatmap: sweep show --heatmap X,Y prints the groups' mean final
// reward over two params, a drawn one in 6 ranges on a log scale, each
// cell's groups counted; a bad --heatmap is a usage error naming the params.
func TestSweep_Heatmap(t *testing.T) {
	h, rs := sweepHarness(t)
	out, _ := h.mustRun(0, "sweep", "--random", "lr=loguniform:1e-4:1e-1", "--grid", "opt=adam,sgd", "--samples", "10",
		"--random-seed", "3", "--", "python3", "train.py")
	id := strings.TrimSpace(out)
	ms := members(t, rs.st, id)
	if len(ms) != 20 {
		t.Fatalf("%d members; want 20", len(ms))
	}
	for _, m := range ms {
		reward := 1.0
		if strings.Contains(string(m.Params), `"sgd"`) {
			reward = 3
		}
		end(t, rs.st, m.ID, core.StatusSucceeded, &reward)
	}
	out, _ = h.mustRun(0, "sweep", "show", id, "--heatmap", "lr,opt")
	_, heat, ok := strings.Cut(out, "mean final reward over lr (columns) and opt (rows), groups averaged in brackets:\n")
	if !ok {
		t.Fatalf("sweep show --heatmap lacks the heatmap:\n%s", out)
	}
	lines := strings.Split(heat, "\n")
	head := strings.Fields(lines[0])
	if len(head) != 9 || head[0] != "OPT" || head[2] != "LR" {
		t.Fatalf("heatmap header %q; want OPT \\ LR and 6 ranges of lr:\n%s", lines[0], heat)
	}
	// Log ranges (the draws span three decades): each one's end is the same
	// multiple of its start; linear ones would shrink from 6 to 1.2.
	var first float64
	for _, r := range head[3:] {
		lo, hi, _ := strings.Cut(r, "..")
		q := parseF(t, hi) / parseF(t, lo)
		if first == 0 {
			first = q
		}
		if q < 2 || math.Abs(q/first-1) > 0.03 {
			t.Errorf("range %s: ratio %.2f, the first %.2f; want ranges of a log scale", r, q, first)
		}
	}
	count := map[string]int{}
	for _, l := range lines[1:3] {
		f := strings.Fields(l)
		for _, c := range regexp.MustCompile(`(\S+) \((\d+)\)`).FindAllStringSubmatch(l, -1) {
			n := 0
			fmt.Sscan(c[2], &n)
			count[f[0]+" "+c[1]] += n
		}
	}
	if lines[1][:3] != "sgd" || lines[2][:4] != "adam" || count["sgd 3"] != 10 || count["adam 1"] != 10 || len(count) != 2 {
		t.Fatalf("heatmap rows (sgd on top, its cells 3, adam's 1, 10 groups each): %v\n%s", count, heat)
	}
	for _, c := range []struct{ arg, want string }{
		{"lr", "two different params"},
		{"lr,lr", "two different params"},
		{"lr,nope", `no group of sweep ` + id + ` has param "nope"; its params: lr, opt`},
	} {
		if _, errs := h.mustRun(2, "sweep", "show", id, "--heatmap", c.arg); !strings.Contains(errs, c.want) {
			t.Errorf("--heatmap %s: stderr %q; want %q", c.arg, errs, c.want)
		}
	}
	if _, errs := h.mustRun(2, "sweep", "show", id, "--heatmap", "lr,opt", "--json"); !strings.Contains(errs, "drop --json") {
		t.Errorf("--heatmap with --json: %q", errs)
	}
}

func parseF(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}

// TestSweep_SearchReference: sweep show of a tpe sweep with ASHA on issue
// 35's reference problem gives the best proposal, the importances of its
// four params, a heatmap of two of them, and says which members ended
// without the metric and that none did when no member reports it.
func TestSweep_SearchReference(t *testing.T) {
	h, rs := sweepHarness(t)
	flags := []string{"sweep", "--method", "tpe", "--budget", "12", "--max-parallel", "12",
		"--random", "lr=loguniform:1e-5:1e-1", "--random", "gamma=uniform:0.8:0.999", "--random", "width=int:16:512",
		"--random", "optimizer=choice:adam,rmsprop,sgd", "--early-stop", "asha", "--min-steps", "100"}
	out, _ := h.mustRun(0, append(flags, "--", "python3", "train.py")...)
	id := strings.TrimSpace(out)
	ms := members(t, rs.st, id)
	if len(ms) != 12 {
		t.Fatalf("%d first proposals; want 12", len(ms))
	}
	ctx := context.Background()
	best, bestValue := "", math.Inf(-1)
	for i, m := range ms {
		var p struct {
			LR, Gamma, Width float64
			Optimizer        string
		}
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatal(err)
		}
		x := []float64{p.Gamma, p.LR, float64(strings.Index("adam rmsprop sgd", p.Optimizer) / 5), p.Width}
		if i < 11 {
			v := reference.Final(x)
			if err := rs.st.AppendMetrics(ctx, m.ID, []core.MetricPoint{{Step: 1000, Name: "episode_reward", Value: v}}); err != nil {
				t.Fatal(err)
			}
			if v > bestValue {
				best, bestValue = m.ID, v
			}
			end(t, rs.st, m.ID, core.StatusSucceeded, &v)
			continue
		}
		started(t, rs.st, m.ID, core.StatusSucceeded)
	}
	out, _ = h.mustRun(0, "sweep", "show", id, "--heatmap", "lr,gamma")
	for _, want := range []string{
		"tpe search of episode_reward: 12 of 12 members proposed",
		"best episode_reward: {",
		fmt.Sprintf("%s [%s, %s] (runs %s)", strconv.FormatFloat(bestValue, 'g', 5, 64), strconv.FormatFloat(bestValue, 'g', 5, 64), strconv.FormatFloat(bestValue, 'g', 5, 64), best),
		"mean final reward over lr (columns) and gamma (rows)",
		"ended without reporting episode_reward (no value, never best): " + ms[11].ID + "\n",
		"never reported the early-stopping metric (not stopped for it): " + ms[11].ID + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep show lacks %q:\n%s", want, out)
		}
	}
	imp := regexp.MustCompile(`(?m)^importance: (.*)$`).FindStringSubmatch(out)
	if imp == nil || len(strings.Split(imp[1], ", ")) != 4 {
		t.Errorf("sweep show: importance of the four params: %q\n%s", imp, out)
	}
	if strings.Contains(out, "no member that ended reported") {
		t.Errorf("sweep show says no member reported the metric, with a best:\n%s", out)
	}

	// A metric no member reports: every ended member, and the sweep says so.
	out, _ = h.mustRun(0, append(flags, "--metric", "episode_rewrad", "--", "python3", "train.py")...)
	id = strings.TrimSpace(out)
	for _, m := range members(t, rs.st, id) {
		if err := rs.st.AppendMetrics(ctx, m.ID, []core.MetricPoint{{Step: 1000, Name: "episode_reward", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		started(t, rs.st, m.ID, core.StatusSucceeded)
	}
	out, _ = h.mustRun(0, "sweep", "show", id)
	if !strings.Contains(out, "no member that ended reported episode_rewrad: is it the name the runs log?") || strings.Contains(out, "best episode_rewrad") {
		t.Errorf("sweep show of a metric no member reports:\n%s", out)
	}
}

// started moves run id to status to, as a run that started.
func started(t *testing.T, st store.Store, id string, to core.Status) {
	t.Helper()
	ctx := context.Background()
	tk, err := st.Task(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	now := time.Now()
	tk.Status, tk.StartedAt = to, &now
	if err := st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
}
