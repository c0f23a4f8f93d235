package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

func TestCompare(t *testing.T) {
	h, rs := sweepHarness(t)
	out, _ := h.mustRun(0, "sweep", "--grid", "lr=0.1,0.2", "--grid", "env=a,b", "--seeds", "3", "--", "python3", "train.py")
	id := strings.TrimSpace(out)
	for i, m := range members(t, rs.st, id) {
		var p struct{ LR float64 }
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatal(err)
		}
		pts := []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: p.LR*100 + float64(i%3)}}
		if err := rs.st.AppendMetrics(context.Background(), m.ID, pts); err != nil {
			t.Fatal(err)
		}
	}
	out, _ = h.mustRun(0, "compare", "--sweep", id, "--by", "lr", "--task", "param.env", "--stat", "iqm,mean",
		"--reps", "200", "--seed", "3", "--profile", "15", "--improve", "0.2:0.1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 9 || !strings.HasPrefix(lines[0], "episode_reward: 12 runs over 2 tasks (a, b), 0 without the metric, 0 skipped") ||
		!regexpMatch(`^GROUP\s+N\s+IQM\s+MEAN\s+SKIPPED$`, lines[1]) ||
		!regexpMatch(`^0\.1\s+6\s+11 \[[0-9.]+, [0-9.]+\]\s+11 \[[0-9.]+, [0-9.]+\]\s+0$`, lines[2]) ||
		!regexpMatch(`^0\.2\s+6\s+21 \[`, lines[3]) ||
		!regexpMatch(`^0\.1\s+15\s+0 \[0, 0\]$`, lines[6]) ||
		lines[len(lines)-1] != "P(0.2 > 0.1) = 1 [1, 1]" {
		t.Fatalf("compare:\n%s", out)
	}
	out, _ = h.mustRun(0, "compare", "--sweep", id, "--by", "lr", "--task", "env", "--reps", "50", "--stat", "iqm", "--improve", "all")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if n := len(lines); n < 3 || !regexpMatch(`^P\(ROW > COLUMN\)\s+0\.1\s+0\.2$`, lines[n-3]) ||
		!regexpMatch(`^0\.1\s+-\s+0 \[0, 0\]$`, lines[n-2]) || !regexpMatch(`^0\.2\s+1 \[1, 1\]\s+-$`, lines[n-1]) {
		t.Fatalf("compare --improve all:\n%s", out)
	}
	out, _ = h.mustRun(0, "compare", "--sweep", id, "--by", "param.lr", "--reps", "10", "--json")
	var a struct {
		Groups []struct {
			Name string `json:"name"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil || len(a.Groups) != 2 {
		t.Fatalf("compare --json: %v\n%s", err, out)
	}
	// --task tag.K goes as it is: no member has a tag env:VALUE, so one task.
	out, _ = h.mustRun(0, "compare", "--sweep", id, "--by", "lr", "--task", "tag.env", "--reps", "10")
	if !strings.HasPrefix(out, "episode_reward: 12 runs over 1 tasks (null)") {
		t.Fatalf("compare --task tag.env:\n%s", out)
	}
	// The server's 400 names the field.
	_, errs := h.mustRun(1, "compare", "--sweep", id, "--reps", "10000000")
	if !strings.Contains(errs, "reps must be an integer 1..50000") {
		t.Fatalf("reps 10^7: %s", errs)
	}
	_, errs = h.mustRun(1, "compare", "--sweep", id, "--metric", "nothing")
	if !strings.Contains(errs, `no run of the selection has a series "nothing"`) {
		t.Fatalf("an unknown metric: %s", errs)
	}
}

// The done-when size, 4 learning rates × 10 seeds on 3 tasks: the
// aggregate table, the profile and the improvement matrix print the
// server's numbers (which TestCompare_PythonClient in httpapi holds to the
// numpy reference), every group and every pair.
func TestCompare_DoneWhenSize(t *testing.T) {
	h, rs := sweepHarness(t)
	out, _ := h.mustRun(0, "sweep", "--grid", "lr=0.1,0.2,0.3,0.4", "--grid", "env=a,b,c", "--seeds", "10", "--", "python3", "train.py")
	id := strings.TrimSpace(out)
	for i, m := range members(t, rs.st, id) {
		pts := []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: float64((i*7919)%97) / 97}}
		if err := rs.st.AppendMetrics(context.Background(), m.ID, pts); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"compare", "--sweep", id, "--by", "lr", "--task", "env", "--seed", "3", "--profile", "0.25,0.5", "--improve", "all"}
	table, _ := h.mustRun(0, args...)
	raw, _ := h.mustRun(0, append(args, "--json")...)
	var a compareAnswer
	if err := json.Unmarshal([]byte(raw), &a); err != nil || len(a.Groups) != 4 || len(a.Tasks) != 3 || len(a.Improvements) != 12 || a.Reps != 2000 {
		t.Fatalf("compare --json: %v\n%s", err, raw)
	}
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 1+1+4+1+1+8+1+1+4 || !strings.HasPrefix(lines[0], "episode_reward: 120 runs over 3 tasks (a, b, c)") {
		t.Fatalf("compare:\n%s", table)
	}
	for i, g := range a.Groups {
		row := strings.Fields(lines[2+i])
		if row[0] != g.Name || row[1] != "30" || strings.Join(row[2:5], " ") != g.Stats["iqm"].String() {
			t.Errorf("group %s's row %q, the server's IQM %s", g.Name, lines[2+i], g.Stats["iqm"])
		}
		for j, p := range g.Profile {
			iv := compareInterval{p[1], [2]*float64{p[2], p[3]}}
			if l := lines[8+2*i+j]; !strings.HasSuffix(l, iv.String()) || !strings.HasPrefix(l, g.Name+" ") {
				t.Errorf("profile line %q, the server's %s", l, iv)
			}
		}
	}
	for _, im := range a.Improvements {
		if !strings.Contains(table, im.compareInterval.String()) {
			t.Errorf("P(%s > %s) = %s is not in the matrix:\n%s", im.A, im.B, im.compareInterval, table)
		}
	}
	if m := strings.Fields(lines[len(lines)-1]); m[0] != "0.4" || m[len(m)-1] != "-" {
		t.Errorf("the matrix's last row %q", lines[len(lines)-1])
	}
}
