package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testListFind: the filters that find runs again (tag, name, sweep,
// rerunOf, params, creation time), alone, together and across pages.
func testListFind(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
	mk := func(id string, u core.User, i int, name, params string, tags ...string) {
		t.Helper()
		tk := core.Task{ID: id, Name: name, UserID: u.ID, Params: json.RawMessage(params), Tags: tags,
			CreatedAt: at(time.Duration(i) * time.Second)}
		if err := s.CreateTask(ctx, &tk); err != nil {
			t.Fatal(err)
		}
	}
	mk("r0", alice, 0, "PPO CartPole", `{"lr": 0.001, "seed": 1, "env": "CartPole-v1"}`, "baseline", "v2")
	mk("r1", alice, 1, "ppo-cartpole-2", `{"lr": 1e-3, "seed": 2, "deep": {"x": 1}}`, "v2")
	mk("r2", bob, 2, "dqn", `{"lr": 0.01, "seed": 1, "norm": true, "clip": null, "gamma": 1}`, "baseline")
	mk("r3", bob, 3, "a2c (ppo-like)", `{"lr": "0.001", "seed": 3, "norm": false, "gamma": 1.0}`)
	mk("r4", alice, 4, "no params", ``, "sweep:s9")
	rr := core.Task{ID: "r5", Name: "rerun of r0", UserID: alice.ID, RerunOf: "r0", CreatedAt: at(5 * time.Second)}
	if err := s.CreateTask(ctx, &rr); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "r5"); got.RerunOf != "r0" || got.SweepID != "" {
		t.Fatalf("rerunOf read back: %+v", got)
	}
	mustSweep(t, s, "s9", alice, 2, 0) // created at 2 s, its members at 0 and 1 ms
	pf := func(k, v string) store.ParamFilter {
		t.Helper()
		f, err := store.ParseParamFilter(k, v)
		if err != nil {
			t.Fatalf("ParseParamFilter(%s, %s): %v", k, v, err)
		}
		return f
	}
	f := func(want []string, fl store.Filter) {
		t.Helper()
		for _, limit := range []int{0, 1, 2} {
			fl.Limit = limit
			checkIDs(t, fmt.Sprintf("ListTasks(%+v)", fl), listAll(t, s, fl), want)
		}
	}
	f([]string{"r2", "r0"}, store.Filter{Tag: "baseline"})
	f([]string{"r1", "r0"}, store.Filter{Tag: "v2"})
	f([]string{"r4", "r-s9-1", "r-s9-0"}, store.Filter{Tag: "sweep:s9"})
	f([]string{"r-s9-1", "r-s9-0"}, store.Filter{Tag: "sweep:s9", Sweep: "s9"}) // a tag alone makes no member
	f(nil, store.Filter{Tag: "base"})
	f([]string{"r3", "r1", "r0"}, store.Filter{Name: "ppo"})
	f([]string{"r1", "r0"}, store.Filter{Name: "CARTPOLE"})
	f([]string{"r3"}, store.Filter{Name: "(ppo-"})
	f(nil, store.Filter{Name: "%"})
	f([]string{"r-s9-1", "r-s9-0"}, store.Filter{Sweep: "s9"})
	f([]string{"r5"}, store.Filter{RerunOf: "r0"})
	f(nil, store.Filter{RerunOf: "r1"})
	// Numbers compare as numbers: 1e-3 is 0.001, 1 is 1.0; "0.001" is a string.
	f([]string{"r1", "r0"}, store.Filter{Params: []store.ParamFilter{pf("lr", "0.001")}})
	f([]string{"r1", "r0"}, store.Filter{Params: []store.ParamFilter{pf("lr", "1e-3")}})
	f([]string{"r3"}, store.Filter{Params: []store.ParamFilter{pf("lr", `"0.001"`)}})
	f([]string{"r3", "r2"}, store.Filter{Params: []store.ParamFilter{pf("gamma", "1")}})
	f([]string{"r3", "r2"}, store.Filter{Params: []store.ParamFilter{pf("gamma", "1.0")}})
	f([]string{"r0"}, store.Filter{Params: []store.ParamFilter{pf("env", "CartPole-v1")}})
	f(nil, store.Filter{Params: []store.ParamFilter{pf("env", "cartpole-v1")}})
	f([]string{"r2"}, store.Filter{Params: []store.ParamFilter{pf("norm", "true")}})
	f([]string{"r3"}, store.Filter{Params: []store.ParamFilter{pf("norm", "false")}})
	f([]string{"r2"}, store.Filter{Params: []store.ParamFilter{pf("clip", "null")}})
	f(nil, store.Filter{Params: []store.ParamFilter{pf("seed", `"1"`)}})
	f([]string{"r2", "r-s9-1", "r0"}, store.Filter{Params: []store.ParamFilter{pf("seed", "1")}})
	f([]string{"r0"}, store.Filter{Params: []store.ParamFilter{pf("seed", "1"), pf("lr", "0.001")}})
	f(nil, store.Filter{Params: []store.ParamFilter{pf("missing", "1")}})
	// Together, and with the older filters.
	f([]string{"r0"}, store.Filter{Tag: "baseline", Params: []store.ParamFilter{pf("seed", "1")}, User: "alice"})
	f([]string{"r2"}, store.Filter{Tag: "baseline", Status: core.StatusQueued, User: "bob"})
	// Creation time: at or after the one, before the other.
	f([]string{"r5", "r4", "r3", "r2"}, store.Filter{CreatedAfter: at(2 * time.Second)})
	f([]string{"r2", "r1"}, store.Filter{CreatedAfter: at(time.Second), CreatedBefore: at(3 * time.Second)})
	f(nil, store.Filter{CreatedAfter: at(9 * time.Second)})
}
