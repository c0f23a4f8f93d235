package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/scripts"
	"github.com/rlsched/rlsched/stats"
)

// compareAnswer is GET /api/compare's answer as the tests read it.
type compareAnswer struct {
	Metric    string   `json:"metric"`
	Reps      int      `json:"reps"`
	Normalize string   `json:"normalize"`
	Tasks     []string `json:"tasks"`
	Runs      int      `json:"runs"`
	Missing   int      `json:"missing"`
	Skipped   int      `json:"skipped"`
	Groups    []struct {
		Key     map[string]any `json:"key"`
		Name    string         `json:"name"`
		N       int            `json:"n"`
		Skipped int            `json:"skipped"`
		Runs    []string       `json:"runs"`
		Stats   map[string]struct {
			Value float64    `json:"value"`
			CI    [2]float64 `json:"ci"`
		} `json:"stats"`
		Profile [][4]float64 `json:"profile"`
		Curve   [][4]float64 `json:"curve"`
	} `json:"groups"`
	Improvement  *compareImprovement  `json:"improvement"`
	Improvements []compareImprovement `json:"improvements"`
}

type compareImprovement struct {
	A     string     `json:"a"`
	B     string     `json:"b"`
	Value float64    `json:"value"`
	CI    [2]float64 `json:"ci"`
}

// compareSweep submits 4 learning rates × 2 envs × 3 seeds and gives
// every member a series of 3 points ending at its score; it returns the
// sweep id and the scores by lr and env.
func (e *testEnv) compareSweep(tok string) (string, map[string]map[string][]float64) {
	e.t.Helper()
	id, runs := e.sweep(tok, `{"base": {"command": ["x"], "tags": ["cmp"]},
		"grid": {"lr": [0.1, 0.2, 0.3, 0.4], "env": ["cartpole", "pendulum"]}, "seedCount": 3}`)
	scores := map[string]map[string][]float64{}
	for i, rid := range runs {
		t := e.task(rid)
		var p struct {
			LR   float64 `json:"lr"`
			Env  string  `json:"env"`
			Seed int     `json:"seed"`
		}
		mustJSON(e.t, t.Params, &p)
		score := p.LR*10 + float64(p.Seed%3) + float64(i%2)*0.5
		if p.Env == "pendulum" {
			score = -score
		}
		pts := []core.MetricPoint{{Step: 0, Name: "episode_reward", Value: 0}, {Step: 10, Name: "episode_reward", Value: score / 2},
			{Step: 20, Name: "episode_reward", Value: score}}
		if err := e.st.AppendMetrics(context.Background(), rid, pts); err != nil {
			e.t.Fatal(err)
		}
		lr := fmt.Sprint(p.LR)
		if scores[lr] == nil {
			scores[lr] = map[string][]float64{}
		}
		scores[lr][p.Env] = append(scores[lr][p.Env], score)
	}
	return id, scores
}

func (e *testEnv) compare(tok, query string) (compareAnswer, resp) {
	e.t.Helper()
	r := e.req("GET", "/api/compare?"+query, tok, nil)
	var a compareAnswer
	if r.status == http.StatusOK {
		mustJSON(e.t, r.body, &a)
	}
	return a, r
}

func TestCompare_Sweep(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id, scores := e.compareSweep(tok)
	q := "sweep=" + id + "&by=param.lr&task=param.env&metric=episode_reward&stat=iqm,mean,median,gap&profile=-3,0,2&improve=0.4:0.1&seed=7&reps=500"
	a, r := e.compare(tok, q)
	if r.status != 200 {
		t.Fatalf("compare: %d %s", r.status, r.body)
	}
	if a.Runs != 24 || a.Missing != 0 || a.Skipped != 0 || len(a.Groups) != 4 || a.Reps != 500 ||
		fmt.Sprint(a.Tasks) != "[cartpole pendulum]" {
		t.Fatalf("answer: %s", r.body)
	}
	for i, g := range a.Groups {
		lr := fmt.Sprint([]float64{0.1, 0.2, 0.3, 0.4}[i])
		if g.Name != lr || g.Key["lr"] != []float64{0.1, 0.2, 0.3, 0.4}[i] || g.N != 6 || len(g.Runs) != 6 {
			t.Fatalf("group %d: %+v", i, g)
		}
		byTask := [][]float64{scores[lr]["cartpole"], scores[lr]["pendulum"]}
		for _, st := range stats.Stats {
			iv := g.Stats[string(st)]
			if want := stats.Estimate(st, byTask, 1); math.Abs(iv.Value-want) > 1e-12 || !(iv.CI[0] <= iv.CI[1]) {
				t.Errorf("group %s %s: %+v, want value %v", lr, st, iv, want)
			}
		}
		if len(g.Profile) != 3 || g.Profile[0][0] != -3 || g.Profile[1][1] != stats.Profile(byTask, 0) {
			t.Errorf("group %s profile %v", lr, g.Profile)
		}
	}
	if im := a.Improvement; im == nil || im.A != "0.4" || im.B != "0.1" || im.Value != 0.5 {
		// Each env's scores rise with lr in cartpole and fall in pendulum.
		t.Errorf("improvement %+v", a.Improvement)
	}
	// The same seed, the same answer; another seed, other intervals.
	if _, again := e.compare(tok, q); string(again.body) != string(r.body) {
		t.Error("the same query answered differently")
	}
	if _, other := e.compare(tok, strings.Replace(q, "seed=7", "seed=8", 1)); string(other.body) == string(r.body) {
		t.Error("another seed, the same intervals")
	}
	// By default the groups are the params without the seed: lr × env.
	if a, r := e.compare(tok, "sweep="+id+"&reps=10"); r.status != 200 || len(a.Groups) != 8 || a.Groups[0].N != 3 ||
		a.Groups[0].Name != "cartpole,0.1" {
		t.Fatalf("default groups: %d %s", r.status, r.body)
	}
	// The filters of /api/tasks select too, and ids.
	if a, r := e.compare(tok, "tag=cmp&by=param.lr&reps=10"); r.status != 200 || len(a.Groups) != 4 || a.Runs != 24 {
		t.Fatalf("by tag: %d %s", r.status, r.body)
	}
	r0, r1 := a.Groups[0].Runs[0], a.Groups[0].Runs[1]
	ids := strings.Join([]string{r0, r1, r0}, ",") // one twice: counted once
	if a, r := e.compare(tok, "ids="+ids+"&by=param.lr&reps=10&stat=mean"); r.status != 200 || len(a.Groups) != 1 ||
		a.Groups[0].N != 2 || len(a.Groups[0].Stats) != 1 {
		t.Fatalf("by ids: %d %s", r.status, r.body)
	}
	// Min–max normalisation, and to a baseline group's mean.
	a, r = e.compare(tok, "sweep="+id+"&by=param.lr&reps=10&stat=mean&normalize=minmax&min=-10&max=10")
	if r.status != 200 || a.Normalize != "minmax" {
		t.Fatalf("minmax: %d %s", r.status, r.body)
	}
	// Mean over both envs of (s+10)/20, the envs' scores opposite: 0.5.
	if v := a.Groups[0].Stats["mean"].Value; math.Abs(v-0.5) > 1e-12 {
		t.Errorf("minmax mean %v", v)
	}
	// Per task: cartpole's scores (1 to 5.5) map by [0, 10], pendulum's by
	// [-10, 0]; lr 0.1's mean over both is then (mean_c/10 + (10 + mean_p)/10) / 2.
	a, r = e.compare(tok, "sweep="+id+"&by=param.lr&task=param.env&reps=10&stat=mean&normalize=minmax"+
		"&min="+url.QueryEscape("cartpole=0,pendulum=-10")+"&max="+url.QueryEscape("cartpole=10,pendulum=0"))
	mc, mp := stats.Mean([][]float64{scores["0.1"]["cartpole"]}), stats.Mean([][]float64{scores["0.1"]["pendulum"]})
	if want := (mc/10 + (10+mp)/10) / 2; r.status != 200 || math.Abs(a.Groups[0].Stats["mean"].Value-want) > 1e-12 {
		t.Fatalf("minmax per task: %d %s, want mean %v", r.status, r.body, want)
	}
	a, r = e.compare(tok, "sweep="+id+"&by=param.lr&task=param.env&reps=10&stat=mean&normalize=baseline&baseline=0.2")
	if r.status != 200 || math.Abs(a.Groups[1].Stats["mean"].Value-1) > 1e-12 {
		t.Fatalf("baseline: %d %s", r.status, r.body)
	}
	// Curves: the IQM over a common step grid.
	a, r = e.compare(tok, "sweep="+id+"&by=param.lr&reps=50&curve=3")
	if r.status != 200 || len(a.Groups[0].Curve) != 3 || a.Groups[0].Curve[0][0] != 0 || a.Groups[0].Curve[2][0] != 20 ||
		a.Groups[0].Curve[0][1] != 0 || math.Abs(a.Groups[0].Curve[2][1]-a.Groups[0].Stats["iqm"].Value) > 1e-12 {
		t.Fatalf("curve: %d %s", r.status, r.body)
	}
}

// A run whose score is not finite (here a window's mean past the largest
// float) is skipped and counted; a run without the metric (the store drops
// NaN points, so also a run that logged only NaNs) is missing.
func TestCompare_SkipsNonFinite(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [1, 2]}, "seedCount": 3}`)
	for i, rid := range runs[:5] {
		pts := []core.MetricPoint{{Step: 1, Name: "r", Value: 0}, {Step: 2, Name: "r", Value: float64(i)}}
		switch i {
		case 1:
			pts = []core.MetricPoint{{Step: 1, Name: "r", Value: math.NaN()}}
		case 2:
			pts = []core.MetricPoint{{Step: 1, Name: "r", Value: math.MaxFloat64}, {Step: 2, Name: "r", Value: math.MaxFloat64}}
		}
		if err := e.st.AppendMetrics(context.Background(), rid, pts); err != nil {
			t.Fatal(err)
		}
	}
	a, r := e.compare(tok, "sweep="+id+"&by=param.lr&metric=r&reps=20&window=2")
	if r.status != 200 || a.Runs != 6 || a.Missing != 2 || a.Skipped != 1 || len(a.Groups) != 2 ||
		a.Groups[0].Skipped != 1 || a.Groups[0].N != 1 || a.Groups[1].N != 2 {
		t.Fatalf("skipped: %d %s", r.status, r.body)
	}
	if _, r := e.compare(tok, "ids="+runs[2]+"&metric=r&window=2"); r.status != 400 || !strings.Contains(string(r.body), "NaN or ±Inf") {
		t.Fatalf("only a skipped run: %d %s", r.status, r.body)
	}
}

func TestCompare_BadInput(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id, _ := e.compareSweep(tok)
	f := func(query, want string) {
		t.Helper()
		_, r := e.compare(tok, query)
		if r.status != 400 || r.errCode(t) != codeBadRequest || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s, want 400 naming %q", query, r.status, r.body, want)
		}
	}
	s := "sweep=" + id + "&by=param.lr"
	f("tag=nothing", "no run")
	f(s+"&metric=nothing", "metric")
	f(s+"&profile=1000", "profile")
	f(s+"&profile=-1000", "τ")
	f(s+"&profile=x", "profile")
	f(s+"&reps=10000000", "reps")
	f(s+"&reps=0", "reps")
	f(s+"&ci=1", "ci")
	f(s+"&ci=NaN", "ci")
	f(s+"&window=0", "window")
	f(s+"&stat=max", "stat")
	f("sweep="+id+"&by=lr", "by")
	f("sweep="+id+"&by=param.", "by")
	f(s+"&task=env", "task")
	f(s+"&normalize=minmax&min=0", "min and max")
	f(s+"&normalize=minmax&min=1&max=1", "differ")
	f(s+"&normalize=zscore", "normalize")
	f(s+"&task=param.env&normalize=minmax&min=cartpole=0&max=10", `min: no value for task \"pendulum\"`)
	f(s+"&task=param.env&normalize=minmax&min=0&max="+url.QueryEscape("cartpole=1,pendulum=2,atari=3"), `max: no task is named \"atari\"`)
	f(s+"&task=param.env&normalize=minmax&min=0&max="+url.QueryEscape("cartpole=0,pendulum=2"), `normalize: task \"cartpole\"`)
	f(s+"&normalize=minmax&min=0&max=a=x", "max must be a finite number, or TASK=NUMBER")
	f(s+"&normalize=baseline", "baseline")
	f(s+"&normalize=baseline&baseline=7", "baseline")
	f(s+"&improve=0.1", "improve")
	f(s+"&improve=0.1:0.1", "improve")
	f(s+"&improve=0.1:9", "improve")
	f(s+"&seed=-1", "seed")
	f(s+"&curve=1", "curve")
	f(s+"&format=csv", "format")
	f(s+"&curve=100000", "curve")
	f("ids=bad/id", "ids")
	f(s+"&reps=50000&curve=1000", "reps × series × grid points")
	if _, r := e.compare(tok, "ids=nosuchrun"); r.status != 404 {
		t.Errorf("an unknown run: %d %s", r.status, r.body)
	}
	if _, r := e.compare(tok, "sweep=snosuch"); r.status != 404 {
		t.Errorf("an unknown sweep: %d %s", r.status, r.body)
	}
	if _, r := e.compare("", "sweep="+id); r.status != 401 {
		t.Errorf("signed out: %d", r.status)
	}
}

// 10,000 groups (a sweep of 10,000 learning rates, one seed each) is a 400
// naming the bound, at once.
func TestCompare_TooManyGroups(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	lrs := make([]string, 10_000)
	for i := range lrs {
		lrs[i] = fmt.Sprint(i)
	}
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [`+strings.Join(lrs, ",")+`]}}`)
	for i, rid := range runs {
		if err := e.st.AppendMetrics(context.Background(), rid, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: float64(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, r := e.compare(tok, "sweep="+url.QueryEscape(id)+"&by=param.lr")
	if r.status != 400 || !strings.Contains(string(r.body), "more than 1000 groups") {
		t.Fatalf("10,000 groups: %d %s", r.status, r.body)
	}
}

// The done-when: a sweep of 4 learning rates × 10 seeds on 3 tasks
// gives the aggregate table, the profile and the improvement matrix through
// the Python client as REST gives them, and both match the textbook
// reference (stats/testdata/reference.py, numpy): point estimates within
// 1e-9, intervals within Monte-Carlo error (at the default 2,000 reps).
func TestCompare_PythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 not found under CI=true: %v", err)
		}
		t.Skipf("python3 not found: %v", err)
	}
	e := newEnv(t)
	tok, _ := e.user("alice")
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [0.1, 0.2, 0.3, 0.4], "env": ["a", "b", "c"]}, "seedCount": 10}`)
	scores := map[string]map[string][]float64{} // lr, env: the runs' scores
	for i, rid := range runs {
		var p struct {
			LR  float64 `json:"lr"`
			Env string  `json:"env"`
		}
		mustJSON(t, e.task(rid).Params, &p)
		score := float64((i*7919)%97)/97 + p.LR // ties across runs, groups apart
		if err := e.st.AppendMetrics(context.Background(), rid, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: score}}); err != nil {
			t.Fatal(err)
		}
		lr := fmt.Sprint(p.LR)
		if scores[lr] == nil {
			scores[lr] = map[string][]float64{}
		}
		scores[lr][p.Env] = append(scores[lr][p.Env], score)
	}
	dir := t.TempDir()
	src, err := scripts.FS.ReadFile("rlsched.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rlsched.py"), src, 0o600); err != nil {
		t.Fatal(err)
	}
	prog := `import json, sys, rlsched
c = rlsched.Client(sys.argv[1], token=sys.argv[2])
print(json.dumps(c.compare(sweep=sys.argv[3], by="lr", task="env", profile=[0.5, 1, 1.2], improve="all", seed=3)))`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", prog, e.url, tok, id)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python client: %v", err)
	}
	var fromPy, fromREST any
	mustJSON(t, out, &fromPy)
	_, r := e.compare(tok, "sweep="+id+"&by=param.lr&task=param.env&profile=0.5,1,1.2&improve=all&seed=3")
	mustJSON(t, r.body, &fromREST)
	if !reflect.DeepEqual(fromPy, fromREST) {
		t.Fatalf("the Python client's answer differs from REST's:\n%s\n%s", out, r.body)
	}
	var a compareAnswer
	mustJSON(t, out, &a)
	if len(a.Groups) != 4 || a.Groups[0].N != 30 || len(a.Tasks) != 3 || a.Reps != 2000 || len(a.Groups[3].Profile) != 3 || len(a.Improvements) != 12 {
		t.Fatalf("answer: %s", out)
	}

	// The reference, given the same scores by group and task.
	type refCase struct {
		Groups  [][][]string `json:"groups"`
		Taus    []float64    `json:"taus"`
		Gamma   float64      `json:"gamma"`
		Improve [][2]int     `json:"improve"`
		Reps    int          `json:"reps"`
		CI      float64      `json:"ci"`
		Seed    int          `json:"seed"`
	}
	type refInterval struct {
		Value float64       `json:"value"`
		Band  [2][2]float64 `json:"band"` // where each end of a 2,000-rep bootstrap may be
	}
	c := refCase{Taus: []float64{0.5, 1, 1.2}, Gamma: stats.DefaultOptions().Gamma, Reps: a.Reps, CI: stats.DefaultOptions().CI, Seed: 3}
	index := map[string]int{}
	for gi, g := range a.Groups {
		index[g.Name] = gi
		var byTask [][]string
		for _, task := range a.Tasks {
			var ss []string
			for _, x := range scores[g.Name][task] {
				ss = append(ss, strconv.FormatFloat(x, 'g', -1, 64))
			}
			byTask = append(byTask, ss)
		}
		c.Groups = append(c.Groups, byTask)
	}
	for _, im := range a.Improvements {
		c.Improve = append(c.Improve, [2]int{index[im.A], index[im.B]})
	}
	in, err := json.Marshal([]refCase{c})
	if err != nil {
		t.Fatal(err)
	}
	ref := exec.CommandContext(ctx, testutil.NumpyPython(t), "../stats/testdata/reference.py")
	ref.Stdin = bytes.NewReader(in)
	out, err = ref.Output()
	if err != nil {
		t.Fatalf("reference.py: %v", err)
	}
	var refs []struct {
		Groups []struct {
			Stats   map[string]refInterval `json:"stats"`
			Profile []refInterval          `json:"profile"`
		} `json:"groups"`
		Improve []refInterval `json:"improve"`
	}
	mustJSON(t, out, &refs)
	check := func(what string, value float64, ci [2]float64, want refInterval) {
		t.Helper()
		in := func(x float64, b [2]float64) bool { return x >= b[0]-1e-9 && x <= b[1]+1e-9 }
		if math.Abs(value-want.Value) > 1e-9 || !in(ci[0], want.Band[0]) || !in(ci[1], want.Band[1]) {
			t.Errorf("%s: %.17g %v, numpy %.17g with ends in %v", what, value, ci, want.Value, want.Band)
		}
	}
	for gi, g := range a.Groups {
		for _, st := range stats.Stats {
			iv := g.Stats[string(st)]
			check("group "+g.Name+" "+string(st), iv.Value, iv.CI, refs[0].Groups[gi].Stats[string(st)])
		}
		for j, p := range g.Profile {
			check(fmt.Sprintf("group %s profile at %g", g.Name, p[0]), p[1], [2]float64{p[2], p[3]}, refs[0].Groups[gi].Profile[j])
		}
	}
	for j, im := range a.Improvements {
		check("P("+im.A+" > "+im.B+")", im.Value, im.CI, refs[0].Improve[j])
	}
}

// Groups are told apart by their values, not by how their names read: the
// string "1" and the number 1 are two groups (both named 1).
func TestCompare_GroupsByValue(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	var ids []string
	for i, v := range []any{"1", 1, 1.0, "1"} {
		id := e.submit(tok, map[string]any{"command": []string{"x"}, "params": map[string]any{"v": v}})
		if err := e.st.AppendMetrics(context.Background(), id, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: float64(i)}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	a, r := e.compare(tok, "ids="+strings.Join(ids, ",")+"&by=param.v&reps=10")
	if r.status != 200 || len(a.Groups) != 2 || a.Groups[0].N != 2 || a.Groups[1].N != 2 || a.Groups[0].Name != "1" {
		t.Fatalf("groups: %d %s", r.status, r.body)
	}
}

// improve=all: every ordered pair, b over a the reverse of a over b.
func TestCompare_ImproveAll(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id, _ := e.compareSweep(tok)
	a, r := e.compare(tok, "sweep="+id+"&by=param.lr&task=param.env&improve=all&reps=200&stat=iqm")
	if r.status != 200 || len(a.Improvements) != 12 || a.Improvement != nil {
		t.Fatalf("improve=all: %d %s", r.status, r.body)
	}
	if im := a.Improvements[0]; im.A != "0.1" || im.B != "0.2" {
		t.Fatalf("the first pair: %+v", im)
	}
	by := map[[2]string]compareImprovement{}
	for _, im := range a.Improvements {
		by[[2]string{im.A, im.B}] = im
	}
	for k, im := range by {
		rev := by[[2]string{k[1], k[0]}]
		if math.Abs(im.Value+rev.Value-1) > 1e-12 || math.Abs(im.CI[0]+rev.CI[1]-1) > 1e-12 || im.CI[0] > im.CI[1] {
			t.Fatalf("%v: %+v, reversed %+v", k, im, rev)
		}
	}
	// The single pair gives the same as its row of the matrix.
	b, _ := e.compare(tok, "sweep="+id+"&by=param.lr&task=param.env&improve=0.1:0.2&reps=200&stat=iqm")
	if b.Improvement == nil || *b.Improvement != a.Improvements[0] {
		t.Fatalf("0.1:0.2 %+v, in the matrix %+v", b.Improvement, a.Improvements[0])
	}
	lrs := make([]string, 21)
	for i := range lrs {
		lrs[i] = fmt.Sprint(i)
	}
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [`+strings.Join(lrs, ",")+`]}}`)
	for _, rid := range runs {
		if err := e.st.AppendMetrics(context.Background(), rid, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, r := e.compare(tok, "sweep="+id+"&by=param.lr&improve=all"); r.status != 400 || !strings.Contains(string(r.body), "improve=all: at most 20 groups") {
		t.Fatalf("improve=all over 21 groups: %d %s", r.status, r.body)
	}
}

// task=tag.NAME: a run's tag NAME:VALUE names its task, as a param would
// (the same answer as task=param.env over the same runs), for a sweep's
// members too.
func TestCompare_TaskByTag(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	var ids []string
	for i := range 12 {
		env := []string{"a", "b", "c"}[i%3]
		id := e.submit(tok, map[string]any{"command": []string{"x"}, "tags": []string{"paper", "env:" + env},
			"params": map[string]any{"lr": 1 + i%2, "env": env, "seed": i}})
		if err := e.st.AppendMetrics(context.Background(), id, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: float64((i * 37) % 11)}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	q := "ids=" + strings.Join(ids, ",") + "&by=param.lr&reps=300&seed=5&profile=2,5&improve=all"
	byTag, r := e.compare(tok, q+"&task=tag.env")
	if r.status != 200 || fmt.Sprint(byTag.Tasks) != "[a b c]" || len(byTag.Groups) != 2 || byTag.Groups[0].N != 6 {
		t.Fatalf("task=tag.env: %d %s", r.status, r.body)
	}
	byParam, _ := e.compare(tok, q+"&task=param.env")
	if !reflect.DeepEqual(byTag.Groups, byParam.Groups) || !reflect.DeepEqual(byTag.Improvements, byParam.Improvements) {
		t.Errorf("by tag %+v\nby param %+v", byTag, byParam)
	}
	// The tag filter selects, the tag's value is the task.
	if a, r := e.compare(tok, "tag=paper&by=param.lr&reps=10&task=tag.env"); r.status != 200 || len(a.Tasks) != 3 || a.Runs != 12 {
		t.Fatalf("tag=paper: %d %s", r.status, r.body)
	}
	id, runs := e.sweep(tok, `{"base": {"command": ["x"], "tags": ["env:hopper"]}, "grid": {"lr": [1, 2]}, "seedCount": 2}`)
	for _, rid := range runs {
		if err := e.st.AppendMetrics(context.Background(), rid, []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if a, r := e.compare(tok, "sweep="+id+"&by=param.lr&reps=10&task=tag.env"); r.status != 200 || fmt.Sprint(a.Tasks) != "[hopper]" || len(a.Groups) != 2 {
		t.Fatalf("a sweep by tag: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"tag.", "tag.a:b", "env"} {
		if _, r := e.compare(tok, q+"&task="+bad); r.status != 400 || !strings.Contains(string(r.body), "param.NAME or tag.NAME") {
			t.Errorf("task=%s: %d %s", bad, r.status, r.body)
		}
	}
}
