package httpapi

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/scripts"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep"
	"github.com/rlsched/rlsched/sweep/reference"
)

// sweepBody is the sweep the tests submit: 2 learning rates × 2 seeds.
const sweepBody = `{"name": "lrs", "project": "cp", "maxParallel": 1,
	"base": {"command": ["python3", "train.py"], "params": {"gamma": 0.99}, "tags": ["t"], "env": {"KEY": "secret"}},
	"grid": {"lr": [0.1, 0.2]}, "seedCount": 2}`

func (e *testEnv) sweep(token, body string) (string, []string) {
	e.t.Helper()
	r := e.req("POST", "/api/sweeps", token, body)
	if r.status != http.StatusAccepted {
		e.t.Fatalf("POST /api/sweeps: %d %s", r.status, r.body)
	}
	var ans struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	mustJSON(e.t, r.body, &ans)
	if !core.ValidTaskID(ans.ID) || !strings.HasPrefix(ans.ID, "s") {
		e.t.Fatalf("sweep id %q", ans.ID)
	}
	return ans.ID, ans.Runs
}

// sweepAnswer is the part of GET /api/sweeps/{id} the tests read.
type sweepAnswer struct {
	ID          string              `json:"id"`
	Name        string              `json:"name"`
	Project     string              `json:"project"`
	User        string              `json:"user"`
	Members     int                 `json:"members"`
	MaxParallel int                 `json:"maxParallel"`
	Counts      map[core.Status]int `json:"counts"`
	Spec        json.RawMessage     `json:"spec"`
	Runs        []core.Task         `json:"runs"`
	Groups      []struct {
		Params      map[string]any      `json:"params"`
		Runs        []string            `json:"runs"`
		N           int                 `json:"n"`
		FinalReward *map[string]float64 `json:"finalReward"`
		Counts      map[core.Status]int `json:"counts"`
	} `json:"groups"`
}

func (e *testEnv) getSweep(token, id string) sweepAnswer {
	e.t.Helper()
	r := e.req("GET", "/api/sweeps/"+id, token, nil)
	if r.status != http.StatusOK {
		e.t.Fatalf("GET sweep %s: %d %s", id, r.status, r.body)
	}
	var a sweepAnswer
	mustJSON(e.t, r.body, &a)
	return a
}

func TestSweep_Create(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	tok, uid := e.user("alice")
	id, runs := e.sweep(tok, sweepBody)
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4", len(runs))
	}
	if n, _ := e.ctl.calls(); n != 1 {
		t.Fatalf("Notify called %d times, want once", n)
	}
	want := []struct {
		lr   float64
		seed int
	}{{0.1, 0}, {0.1, 1}, {0.2, 0}, {0.2, 1}}
	for i, rid := range runs {
		tk := e.task(rid)
		w := want[i]
		params := fmt.Sprintf(`{"gamma":0.99,"lr":%g,"seed":%d}`, w.lr, w.seed)
		argv := []string{"python3", "train.py", "--gamma", "0.99", "--lr", fmt.Sprint(w.lr), "--seed", fmt.Sprint(w.seed)}
		if tk.SweepID != id || string(tk.Params) != params || !reflect.DeepEqual(tk.Command, argv) ||
			!reflect.DeepEqual(tk.Tags, []string{"t", core.SweepTag(id)}) || tk.UserID != uid || tk.Project != "cp" ||
			tk.Name != fmt.Sprintf("lrs lr=%g seed=%d", w.lr, w.seed) || tk.Env["KEY"] != "secret" || tk.Status != core.StatusQueued {
			t.Fatalf("member %d: %+v", i, tk)
		}
	}
	a := e.getSweep(tok, id)
	if a.ID != id || a.Name != "lrs" || a.Project != "cp" || a.User != "alice" || a.Members != 4 || a.MaxParallel != 1 ||
		a.Counts[core.StatusQueued] != 4 || len(a.Runs) != 4 || len(a.Groups) != 2 {
		t.Fatalf("GET sweep: %+v", a)
	}
	for i, r := range a.Runs {
		if r.ID != runs[i] {
			t.Fatalf("runs not in member order: %v", a.Runs)
		}
	}
	if b := e.req("GET", "/api/sweeps/"+id+"?runs=false", tok, nil); b.status != 200 || strings.Contains(string(b.body), `"runs":[{`) ||
		!strings.Contains(string(b.body), `"groups":[{`) {
		t.Fatalf("runs=false: %d %s", b.status, b.body)
	}
	if !strings.Contains(string(a.Spec), `"secret"`) {
		t.Fatalf("the owner's spec lacks its env: %s", a.Spec)
	}
	// Another user sees the spec with env values masked, as a run's.
	bob, _ := e.user("bob")
	if b := e.getSweep(bob, id); strings.Contains(string(b.Spec), "secret") || !strings.Contains(string(b.Spec), `"KEY":"***"`) ||
		b.Runs[0].Env["KEY"] != "***" {
		t.Fatalf("bob sees %s and env %v", b.Spec, b.Runs[0].Env)
	}
	if b := e.getSweep(root, id); !strings.Contains(string(b.Spec), "secret") {
		t.Fatalf("an admin sees %s", b.Spec)
	}

	// Final rewards: the groups' statistics, best mean first.
	rewards := []float64{1, 3, 10, 20}
	for i, rid := range runs {
		if err := e.st.SetFinalReward(context.Background(), rid, rewards[i]); err != nil {
			t.Fatal(err)
		}
		e.finish(rid, core.StatusSucceeded)
	}
	a = e.getSweep(tok, id)
	g := a.Groups
	if g[0].Params["lr"] != 0.2 || g[0].Params["gamma"] != 0.99 || g[0].Params["seed"] != nil || g[0].N != 2 ||
		(*g[0].FinalReward)["mean"] != 15 || math.Abs((*g[0].FinalReward)["std"]-math.Sqrt(50)) > 1e-12 ||
		(*g[0].FinalReward)["min"] != 10 || (*g[0].FinalReward)["max"] != 20 || g[0].Counts[core.StatusSucceeded] != 2 ||
		!reflect.DeepEqual(g[0].Runs, runs[2:]) || g[1].Params["lr"] != 0.1 || (*g[1].FinalReward)["mean"] != 2 {
		t.Fatalf("groups: %+v", g)
	}
	r := e.req("GET", "/api/sweeps/"+id+"?format=csv", tok, nil)
	rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
	if r.status != 200 || err != nil || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
		t.Fatalf("CSV: %d %v %s", r.status, err, r.body)
	}
	if strings.Join(rows[0], ",") != "gamma,lr,n,mean,std,min,max,runs,QUEUED,DISPATCHED,RUNNING,LOST,SUCCEEDED,FAILED,CANCELLED,TIMEOUT" ||
		strings.Join(rows[1][:8], ",") != "0.99,0.2,2,15,7.0710678118654755,10,20,2" || rows[1][12] != "2" || len(rows) != 3 {
		t.Fatalf("CSV rows: %q", rows)
	}

	// The list, with counts.
	var list struct {
		Items []struct {
			ID     string              `json:"id"`
			User   string              `json:"user"`
			Counts map[core.Status]int `json:"counts"`
		} `json:"items"`
	}
	e.sweep(bob, `{"base": {"command": ["x"]}, "seeds": [7]}`)
	r = e.req("GET", "/api/sweeps?user=alice", tok, nil)
	mustJSON(t, r.body, &list)
	if len(list.Items) != 1 || list.Items[0].ID != id || list.Items[0].Counts[core.StatusSucceeded] != 4 {
		t.Fatalf("GET /api/sweeps?user=alice: %s", r.body)
	}
	mustJSON(t, e.req("GET", "/api/sweeps", tok, nil).body, &list)
	if len(list.Items) != 2 || list.Items[0].User != "bob" {
		t.Fatalf("GET /api/sweeps: %+v", list)
	}
}

func TestSweep_CreateFailure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	f := func(body, field string) {
		t.Helper()
		r := e.req("POST", "/api/sweeps", tok, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" {
			t.Fatalf("%.100s: want 400, got %d %s", body, r.status, r.body)
		}
		var b struct {
			Error struct{ Message string } `json:"error"`
		}
		mustJSON(t, r.body, &b)
		if !strings.HasPrefix(b.Error.Message, field) {
			t.Fatalf("%.100s: the message should start with %q: %s", body, field, b.Error.Message)
		}
	}
	big := make([]string, 101)
	for i := range big {
		big[i] = fmt.Sprint(i)
	}
	vals := "[" + strings.Join(big, ",") + "]"
	f(`{"base": {"command": ["x"]}, "grid": {"a": `+vals+`, "b": `+vals+`}}`, "grid")
	f(`{"base": {"command": ["x"]}, "grid": {}}`, "grid")
	f(`{"base": {"command": ["x"]}}`, "grid")
	f(`{"base": {"command": ["x"]}, "random": {"lr": {"dist": "loguniform", "min": 0, "max": 1}}, "samples": 4}`, "random.lr.min")
	f(`{"base": {"command": ["x"]}, "grid": {"-lr": [1]}}`, "grid")
	f(`{"base": {"command": ["x"]}, "grid": {"lr x": [1]}}`, "grid")
	f(`{"base": {"command": ["x"]}, "grid": {"seed": [1, 2]}, "seeds": [1]}`, "grid.seed")
	f(`{"base": {"command": ["x"]}, "seedCount": 0}`, "seedCount")
	f(`{"base": {"command": ["x"]}, "seeds": [1], "maxParallel": -1}`, "maxParallel")
	f(`{"base": {"command": ["x"], "gpus": -1}, "seeds": [1]}`, "base: gpus")
	f(`{"base": {"command": "x"}, "seeds": [1]}`, "base: field \"command\"")
	f(`{"base": {}, "seeds": [1]}`, "base: give command")
	f(`{"base": {"command": ["x"], "params": {"a b": 1}}, "seeds": [1]}`, "base.params")
	tags := make([]string, 32)
	for i := range tags {
		tags[i] = fmt.Sprintf("%q", fmt.Sprint("t", i))
	}
	f(`{"base": {"command": ["x"], "tags": [`+strings.Join(tags, ",")+`]}, "seeds": [1]}`, "base.tags")
	f(`not json`, "send a JSON object")
	// Search and early stopping (issue 35): tpe over a grid alone, a budget
	// of 0 or 10^6, rungs not increasing.
	lr := `"random": {"lr": {"dist": "loguniform", "min": 1e-5, "max": 1e-2}}`
	f(`{"base": {"command": ["x"]}, "method": "tpe", "grid": {"a": [1, 2]}, "budget": 4}`, "random: tpe searches random params")
	f(`{"base": {"command": ["x"]}, "method": "tpe", `+lr+`, "budget": 0}`, "budget")
	f(`{"base": {"command": ["x"]}, "method": "tpe", `+lr+`, "budget": 1000000}`, "budget")
	f(`{"base": {"command": ["x"]}, "method": "tpe", `+lr+`, "budget": 4, "earlyStop": {"method": "asha", "rungs": [300, 100]}}`, "earlyStop.rungs[1]")
	if ts, _, err := e.st.ListTasks(context.Background(), store.Filter{}); err != nil || len(ts) != 0 {
		t.Fatalf("failed sweeps left runs: %v %v", ts, err)
	}
	if sws, _, err := e.st.ListSweeps(context.Background(), store.SweepFilter{}); err != nil || len(sws) != 0 {
		t.Fatalf("failed sweeps left sweeps: %v %v", sws, err)
	}
	// The largest sweep there may be is accepted.
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"a": `+vals[:strings.LastIndex(vals, ",")]+`]}, "seedCount": 100}`)
	if len(runs) != 10_000 {
		t.Fatalf("sweep %s: %d runs, want 10,000", id, len(runs))
	}
	// Paths and methods.
	if r := e.req("PUT", "/api/sweeps", tok, `{}`); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, POST" {
		t.Fatalf("PUT /api/sweeps: %d %v", r.status, r.header)
	}
	if r := e.req("GET", "/api/sweeps/bad%20id", tok, nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "malformed sweep id") {
		t.Fatalf("a bad sweep id: %d %s", r.status, r.body)
	}
	for _, p := range []string{"/api/sweeps/s-missing", "/api/sweeps/s-missing/metrics", "/api/sweeps/" + id + "/nope"} {
		if r := e.req("GET", p, tok, nil); r.status != http.StatusNotFound {
			t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
	}
	if r := e.req("POST", "/api/sweeps/s-missing/retry", tok, nil, "Content-Type", "application/json"); r.status != http.StatusNotFound {
		t.Fatalf("retry of an unknown sweep: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/api/sweeps/"+id+"?format=xml", tok, nil); r.status != http.StatusBadRequest {
		t.Fatalf("format=xml: %d", r.status)
	}
	if r := e.req("GET", "/api/sweeps", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("GET /api/sweeps without a token: %d", r.status)
	}
}

func TestSweep_RetryAndCancel(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	tok, _ := e.user("alice")
	bob, _ := e.user("bob")
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [1, 2, 3]}, "seeds": [5, 6]}`)
	post := func(token, path string) resp {
		t.Helper()
		return e.req("POST", path, token, nil, "Content-Type", "application/json")
	}
	for i, st := range []core.Status{core.StatusFailed, core.StatusSucceeded, core.StatusCancelled, core.StatusTimeout} {
		e.finish(runs[i], st)
	}
	if r := post(bob, "/api/sweeps/"+id+"/retry"); r.status != http.StatusForbidden || r.errCode(t) != "forbidden" {
		t.Fatalf("bob retries alice's sweep: %d %s", r.status, r.body)
	}
	if r := post(bob, "/api/sweeps/"+id+"/cancel"); r.status != http.StatusForbidden {
		t.Fatalf("bob cancels alice's sweep: %d %s", r.status, r.body)
	}
	var ans struct {
		Runs []string `json:"runs"`
	}
	r := post(tok, "/api/sweeps/"+id+"/retry")
	mustJSON(t, r.body, &ans)
	if r.status != http.StatusAccepted || len(ans.Runs) != 3 {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	for i, old := range []string{runs[0], runs[2], runs[3]} {
		nt := e.task(ans.Runs[i])
		ot := e.task(old)
		if nt.RerunOf != old || nt.SweepID != id || !reflect.DeepEqual(nt.Command, ot.Command) || string(nt.Params) != string(ot.Params) ||
			nt.Status != core.StatusQueued || nt.User != "alice" || !slices.Contains(nt.Tags, core.SweepTag(id)) {
			t.Fatalf("retry of %s: %+v", old, nt)
		}
	}
	if r := post(tok, "/api/sweeps/"+id+"/retry"); r.status != http.StatusAccepted || !strings.Contains(string(r.body), `"runs":[]`) {
		t.Fatalf("a second retry: %d %s", r.status, r.body)
	}
	a := e.getSweep(tok, id)
	if a.Counts[core.StatusQueued] != 5 || a.Counts[core.StatusSucceeded] != 1 || len(a.Runs) != 6 || a.Runs[0].ID != ans.Runs[0] {
		t.Fatalf("after the retry: %+v", a.Counts)
	}
	// An admin may retry another user's sweep; the runs stay the owner's.
	e.finish(ans.Runs[0], core.StatusFailed)
	r = post(root, "/api/sweeps/"+id+"/retry")
	mustJSON(t, r.body, &ans)
	if r.status != http.StatusAccepted || len(ans.Runs) != 1 || e.task(ans.Runs[0]).User != "alice" {
		t.Fatalf("an admin's retry: %d %s", r.status, r.body)
	}
	// Cancel stops every member still queued or active, and nothing else.
	r = post(tok, "/api/sweeps/"+id+"/cancel")
	mustJSON(t, r.body, &ans)
	if r.status != http.StatusAccepted || len(ans.Runs) != 5 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	a = e.getSweep(tok, id)
	if a.Counts[core.StatusCancelled] != 5 || a.Counts[core.StatusSucceeded] != 1 {
		t.Fatalf("after the cancel: %v", a.Counts)
	}
	if r := post(tok, "/api/sweeps/"+id+"/cancel"); r.status != http.StatusAccepted || !strings.Contains(string(r.body), `"runs":[]`) {
		t.Fatalf("a second cancel: %d %s", r.status, r.body)
	}
}

func TestSweep_Metrics(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [1, 2]}, "seedCount": 2}`)
	for i, rid := range runs {
		pts := []core.MetricPoint{{Step: 1, Name: "episode_reward", Value: float64(i)}, {Step: 2, Name: "episode_reward", Value: float64(2 * i)},
			{Step: 1, Name: "loss", Value: 1}}
		if err := e.st.AppendMetrics(context.Background(), rid, pts); err != nil {
			t.Fatal(err)
		}
	}
	var ans struct {
		SweepID string `json:"sweepId"`
		Name    string `json:"name"`
		Groups  []struct {
			Params map[string]any `json:"params"`
			Runs   []string       `json:"runs"`
			Series [][6]float64   `json:"series"`
		} `json:"groups"`
	}
	r := e.req("GET", "/api/sweeps/"+id+"/metrics", tok, nil)
	mustJSON(t, r.body, &ans)
	if r.status != 200 || ans.SweepID != id || ans.Name != "episode_reward" || len(ans.Groups) != 2 {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	// Members 0,1 are lr=1 (rewards 0,1 then 0,2); 2,3 lr=2 (2,3 then 4,6).
	byLR := map[float64][][6]float64{}
	for _, g := range ans.Groups {
		byLR[g.Params["lr"].(float64)] = g.Series
	}
	// [step, mean, std, n, min, max]
	want := map[float64][][6]float64{
		1: {{1, 0.5, math.Sqrt(0.5), 2, 0, 1}, {2, 1, math.Sqrt(2), 2, 0, 2}},
		2: {{1, 2.5, math.Sqrt(0.5), 2, 2, 3}, {2, 5, math.Sqrt(2), 2, 4, 6}},
	}
	if !reflect.DeepEqual(byLR, want) {
		t.Fatalf("curves %v, want %v", byLR, want)
	}
	// Ended, the curves are made once and reused while nothing changes; a
	// late point (a store outage's backlog) or a new final reward is seen.
	for _, rid := range runs {
		e.finish(rid, core.StatusSucceeded)
	}
	curve := func() string {
		t.Helper()
		r := e.req("GET", "/api/sweeps/"+id+"/metrics", tok, nil)
		if r.status != 200 {
			t.Fatalf("metrics: %d %s", r.status, r.body)
		}
		return string(r.body)
	}
	first := curve()
	if curve() != first || curve() != first || !strings.Contains(first, `[2,1,1.4142135623730951,2,0,2]`) {
		t.Fatalf("ended curves changed without a change:\n%s", first)
	}
	if err := e.st.AppendMetrics(context.Background(), runs[0], []core.MetricPoint{{Step: 3, Name: "episode_reward", Value: 9}}); err != nil {
		t.Fatal(err)
	}
	if late := curve(); late == first || !strings.Contains(late, `[3,9,0,1,9,9]`) {
		t.Fatalf("a late point is not in the curves:\n%s", late)
	}
	r = e.req("GET", "/api/sweeps/"+id+"/metrics?name=nothing", tok, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"series":[]`) {
		t.Fatalf("metrics of an unknown name: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/api/sweeps/"+id+"/metrics?name="+strings.Repeat("x", 129), tok, nil); r.status != 400 {
		t.Fatalf("a long name: %d", r.status)
	}
}

func TestFindRuns(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	a := e.submit(tok, `{"command": ["x"], "name": "PPO baseline", "tags": ["base"], "params": {"lr": 0.001, "env": "CartPole-v1"}}`)
	b := e.submit(tok, `{"command": ["x"], "name": "dqn", "params": {"lr": 1e-3, "seed": 3}}`)
	c := e.submit(tok, `{"command": ["x"], "name": "ppo again", "params": {"lr": "0.001"}}`)
	sid, members := e.sweep(tok, `{"base": {"command": ["x"]}, "seeds": [1, 2]}`)
	list := func(q string) []string {
		t.Helper()
		r := e.req("GET", "/api/tasks?"+q, tok, nil)
		if r.status != 200 {
			t.Fatalf("GET /api/tasks?%s: %d %s", q, r.status, r.body)
		}
		var page struct{ Items []core.Task }
		mustJSON(t, r.body, &page)
		var ids []string
		for _, t := range page.Items {
			ids = append(ids, t.ID)
		}
		return ids
	}
	f := func(q string, want ...string) {
		t.Helper()
		if got := list(q); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("?%s: %v, want %v", q, got, want)
		}
	}
	f("tag=base", a)
	f("name=PPO", c, a)
	f("sweep="+sid, members[1], members[0])
	f("tag=sweep:"+sid, members[1], members[0])
	f("param.lr=0.001", b, a)
	f("param.lr=1e-3&name=dqn", b)
	f("param.lr=%220.001%22", c)
	f("param.env=CartPole-v1", a)
	f("param.seed=3&param.lr=0.001", b)
	f("createdAfter=2200-01-01T00:00:00Z")
	f("createdBefore=2000-01-01T00:00:00Z")
	all := list("createdAfter=2000-01-01T00:00:00Z&limit=10")
	if len(all) != 5 {
		t.Fatalf("createdAfter 2000: %v", all)
	}
	bad := func(q, param string) {
		t.Helper()
		r := e.req("GET", "/api/tasks?"+q, tok, nil)
		if r.status != 400 || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), param) {
			t.Fatalf("?%s: want 400 naming %s, got %d %s", q, param, r.status, r.body)
		}
	}
	bad("createdAfter=yesterday", "createdAfter")
	bad("createdBefore=2025-13-01T00:00:00Z", "createdBefore")
	bad("sweep=a%20b", "sweep")
	bad("rerunOf=../x", "rerunOf")
	bad("param.lr=%5B1%5D", "param.lr")
	bad("param.-x=1", "param.-x")
	bad("format=xml", "format")
	bad("tag="+strings.Repeat("x", 65), "tag")

	// CSV: the fixed columns, then the params seen in the page, sorted.
	r := e.req("GET", "/api/tasks?format=csv&limit=2", tok, nil)
	rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
	if r.status != 200 || err != nil || r.header.Get("X-Next-Cursor") == "" {
		t.Fatalf("CSV: %d %v %v %s", r.status, err, r.header, r.body)
	}
	if strings.Join(rows[0], ",") != "id,name,user,project,status,attempt,createdAt,finishedAt,finalReward,seed" ||
		len(rows) != 3 || rows[1][0] != members[1] || rows[1][9] != "2" || rows[1][4] != "QUEUED" {
		t.Fatalf("CSV rows: %q", rows)
	}
	r = e.req("GET", "/api/tasks?format=csv&tag=base", tok, nil)
	rows, _ = csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
	if strings.Join(rows[0][9:], ",") != "env,lr" || strings.Join(rows[1][9:], ",") != "CartPole-v1,0.001" || r.header.Get("X-Next-Cursor") != "" {
		t.Fatalf("CSV of a: %q", rows)
	}
}

func TestRerunRecordsOrigin(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	orig := e.submit(tok, `{"command": ["x"]}`)
	r := e.req("POST", "/api/tasks/"+orig+"/rerun", tok, nil, "Content-Type", "application/json")
	m := r.json(t)
	again, _ := m["id"].(string)
	if r.status != http.StatusAccepted || m["rerunOf"] != orig || e.task(again).RerunOf != orig {
		t.Fatalf("rerun: %d %s", r.status, r.body)
	}
	if got := e.req("GET", "/api/tasks/"+again, tok, nil).json(t); got["rerunOf"] != orig {
		t.Fatalf("GET the rerun: %v", got)
	}
	if got := e.req("GET", "/api/tasks/"+orig, tok, nil).json(t); got["rerunOf"] != nil || got["sweepId"] != nil {
		t.Fatalf("GET the origin: %v", got)
	}
	r = e.req("GET", "/api/tasks?rerunOf="+orig, tok, nil)
	if !strings.Contains(string(r.body), again) || strings.Count(string(r.body), `"id":`) != 1 {
		t.Fatalf("?rerunOf=: %s", r.body)
	}
	// A rerun of a member is a run of its own, outside the sweep.
	sid, members := e.sweep(tok, `{"base": {"command": ["x"], "tags": ["keep"]}, "seeds": [1]}`)
	r = e.req("POST", "/api/tasks/"+members[0]+"/rerun", tok, nil, "Content-Type", "application/json")
	nt := e.task(r.json(t)["id"].(string))
	if nt.SweepID != "" || nt.RerunOf != members[0] || !reflect.DeepEqual(nt.Tags, []string{"keep"}) {
		t.Fatalf("rerun of a member of %s: %+v", sid, nt)
	}
}

func TestPythonClientServed(t *testing.T) {
	e := newEnv(t)
	want, err := scripts.FS.ReadFile("rlsched.py")
	if err != nil {
		t.Fatal(err)
	}
	r := e.req("GET", "/rlsched.py", "", nil)
	if r.status != 200 || string(r.body) != string(want) || !strings.HasPrefix(r.header.Get("Content-Type"), "text/x-python") {
		t.Fatalf("GET /rlsched.py: %d %v", r.status, r.header)
	}
	if r := e.req("GET", "/rlsched.py", "", nil, "If-None-Match", r.header.Get("ETag")); r.status != http.StatusNotModified {
		t.Fatalf("revalidation: %d", r.status)
	}
	if r := e.req("POST", "/rlsched.py", "", nil); r.status != http.StatusMethodNotAllowed {
		t.Fatalf("POST /rlsched.py: %d", r.status)
	}
}

// TestRunsCSVIsInert (issue 25): a cell a spreadsheet would run as a
// formula (a user's run name, a param) starts with an apostrophe in the
// CSV; plain numbers, negative ones too, stay numbers.
func TestRunsCSVIsInert(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("mallory")
	e.submit(tok, `{"name": "=HYPERLINK(\"http://x\")", "command": ["x"], "params": {"cmd": "@SUM(A1)", "lr": -0.5, "note": "-2+3", "tab": "\tx"}}`)
	r := e.req("GET", "/api/tasks?format=csv", tok, nil)
	rows, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
	if r.status != 200 || err != nil || len(rows) != 2 {
		t.Fatalf("CSV: %d %v %s", r.status, err, r.body)
	}
	got := map[string]string{}
	for i, col := range rows[0] {
		got[col] = rows[1][i]
	}
	want := map[string]string{"name": `'=HYPERLINK("http://x")`, "cmd": "'@SUM(A1)", "lr": "-0.5", "note": "'-2+3", "tab": "'\tx"}
	for col, w := range want {
		if got[col] != w {
			t.Errorf("column %s = %q, want %q", col, got[col], w)
		}
	}
}

// TestPriorityClampedOnEveryPath (issue 25): a priority an admin gave a
// user's run once is not carried by the user's own rerun or sweep retry;
// an admin's own rerun keeps it.
func TestPriorityClampedOnEveryPath(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root")
	tok, _ := e.user("alice")
	id, runs := e.sweep(tok, `{"base": {"command": ["x"]}, "grid": {"lr": [1, 2]}}`)
	raise := func(run string) {
		t.Helper()
		if r := e.req("POST", "/api/tasks/"+run+"/priority", root, `{"priority": 10}`); r.status != 200 {
			t.Fatalf("an admin raises %s: %d %s", run, r.status, r.body)
		}
	}
	raise(runs[0])
	e.finish(runs[0], core.StatusFailed)
	var ans struct {
		ID   string   `json:"id"`
		Runs []string `json:"runs"`
	}
	r := e.req("POST", "/api/sweeps/"+id+"/retry", tok, nil, "Content-Type", "application/json")
	mustJSON(t, r.body, &ans)
	if r.status != http.StatusAccepted || len(ans.Runs) != 1 {
		t.Fatalf("retry: %d %s", r.status, r.body)
	}
	if p := e.task(ans.Runs[0]).Priority; p != 0 {
		t.Errorf("alice's sweep retry kept priority %d", p)
	}
	raise(runs[1])
	for who, want := range map[string]int{tok: 0, root: 10} {
		r := e.req("POST", "/api/tasks/"+runs[1]+"/rerun", who, nil, "Content-Type", "application/json")
		mustJSON(t, r.body, &ans)
		if p := e.task(ans.ID).Priority; r.status != http.StatusAccepted || p != want {
			t.Errorf("rerun: %d, priority %d, want %d", r.status, p, want)
		}
	}
}

// TestSweep_SearchResults: GET /api/sweeps/{id} of a tpe + ASHA sweep on
// issue 35's reference problem names the best proposal with its interval
// and the params' importances, the members that started without reporting
// the early-stopping metric (unreported: never stopped for lacking it) and
// the one of them that ended without the sweep's metric (noObjective: a
// metric no member reports shows there, not as a search finding nothing).
func TestSweep_SearchResults(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	body := `{"base": {"command": ["python3", "train.py"]}, "method": "tpe", "budget": 12, "maxParallel": 12,
		"random": ` + reference.Random + `, "earlyStop": {"method": "asha", "minSteps": 100}}`
	id, runs := e.sweep(tok, body)
	if len(runs) != 12 {
		t.Fatalf("%d first proposals; want 12", len(runs))
	}
	spec, err := sweep.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	best, bestValue := "", math.Inf(-1)
	for i, rid := range runs {
		tk, err := e.st.Task(ctx, rid)
		if err != nil {
			t.Fatal(err)
		}
		x, err := spec.Point(tk.Params)
		if err != nil {
			t.Fatal(err)
		}
		exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
		now := time.Now()
		tk.StartedAt, tk.Status = &now, core.StatusSucceeded
		switch i {
		case 10: // ends without a point of the metric
		case 11: // runs without one
			tk.Status = core.StatusRunning
		default:
			v := reference.Final(x)
			pts := []core.MetricPoint{{Step: 100, Name: "episode_reward", Value: reference.Curve(x, 100)}, {Step: 1000, Name: "episode_reward", Value: v}}
			if err := e.st.AppendMetrics(ctx, rid, pts); err != nil {
				t.Fatal(err)
			}
			if v > bestValue {
				best, bestValue = rid, v
			}
		}
		if err := e.st.UpdateTask(ctx, &tk, exp); err != nil {
			t.Fatal(err)
		}
	}
	r := e.req("GET", "/api/sweeps/"+id, tok, nil)
	var got struct {
		Best *struct {
			Value float64    `json:"value"`
			CI    [2]float64 `json:"ci"`
			Runs  []string   `json:"runs"`
		} `json:"best"`
		Importance []struct {
			Param string  `json:"param"`
			Value float64 `json:"value"`
		} `json:"importance"`
		Unreported  []string `json:"unreported"`
		NoObjective []string `json:"noObjective"`
	}
	mustJSON(t, r.body, &got)
	if got.Best == nil || !slices.Equal(got.Best.Runs, []string{best}) || got.Best.Value != bestValue || got.Best.CI != [2]float64{bestValue, bestValue} {
		t.Fatalf("best %+v; want run %s = %v [%v, %v] (one seed)", got.Best, best, bestValue, bestValue, bestValue)
	}
	var names []string
	for i, im := range got.Importance {
		names = append(names, im.Param)
		if i > 0 && im.Value > got.Importance[i-1].Value {
			t.Errorf("importance %+v: not most important first", got.Importance)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"gamma", "lr", "optimizer", "width"}) {
		t.Fatalf("importance over %v; want the reference's four params", names)
	}
	if !slices.Equal(got.Unreported, runs[10:]) || !slices.Equal(got.NoObjective, runs[10:11]) {
		t.Fatalf("unreported %v, noObjective %v; want %v, %v", got.Unreported, got.NoObjective, runs[10:], runs[10:11])
	}
}

// appendCurves writes a large sweep's groups in ranges at once (split):
// the answer is the one encoding/json makes of the same groups, in order.
func TestAppendCurvesSplit(t *testing.T) {
	var groups []sweep.Group
	for i := range 300 {
		g := sweep.Group{Params: json.RawMessage(fmt.Sprintf(`{"lr":%d}`, i)), Runs: []string{fmt.Sprintf("r%d", i), "r-\"x\""}}
		for s := range 500 {
			g.Series = append(g.Series, sweep.Point{Step: float64(s), Mean: float64(i) / 7, Std: float64(s) / 3, N: 2, Min: -1, Max: 1e300})
		}
		groups = append(groups, g)
	}
	type group struct {
		Params json.RawMessage `json:"params"`
		Runs   []string        `json:"runs"`
		Series []sweep.Point   `json:"series"`
	}
	want := struct {
		SweepID string  `json:"sweepId"`
		Name    string  `json:"name"`
		Groups  []group `json:"groups"`
	}{SweepID: "s1", Name: "episode_reward"}
	for _, g := range groups {
		want.Groups = append(want.Groups, group{g.Params, g.Runs, g.Series})
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got := appendCurves("s1", "episode_reward", groups)
	if !bytes.Equal(got, wantJSON) {
		t.Fatalf("appendCurves differs from encoding/json: %d bytes vs %d", len(got), len(wantJSON))
	}
	// Regions estimated too small: the ranges outgrow them and are joined by copy.
	defer func(n int) { curveBytesPerPoint = n }(curveBytesPerPoint)
	curveBytesPerPoint = 1
	if got := appendCurves("s1", "episode_reward", groups); !bytes.Equal(got, wantJSON) {
		t.Fatalf("appendCurves with regions too small differs from encoding/json: %d bytes vs %d", len(got), len(wantJSON))
	}
	curveBytesPerPoint = 40 // some ranges fit, some do not
	if got := appendCurves("s1", "episode_reward", groups); !bytes.Equal(got, wantJSON) {
		t.Fatalf("appendCurves with tight regions differs from encoding/json: %d bytes vs %d", len(got), len(wantJSON))
	}
	if one := appendCurves("s1", "episode_reward", groups[:1]); !json.Valid(one) {
		t.Fatalf("one group: %s", one)
	}
	if none := appendCurves("s1", "x", nil); string(none) != `{"sweepId":"s1","name":"x","groups":[]}` {
		t.Fatalf("no group: %s", none)
	}
}
