package sweep

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/sweep/earlystop"
	"github.com/rlsched/rlsched/sweep/goal"
)

const lrRandom = `"random":{"lr":{"dist":"loguniform","min":1e-5,"max":1e-2}}`

func TestParseSearch_Failure(t *testing.T) {
	f := func(body, wantField, wantIn string) {
		t.Helper()
		_, err := Parse([]byte(body))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != wantField || !strings.Contains(err.Error(), wantIn) {
			t.Errorf("Parse(%s) = %v; want a FieldError on %q with %q", body, err, wantField, wantIn)
		}
	}
	// method
	f(`{"method":"bayes",`+lrRandom+`,"samples":2}`, "method", `unknown method "bayes"`)
	f(`{"method":3,"seedCount":2}`, "method", "must be a string")
	f(`{"method":"grid",`+lrRandom+`,"samples":2}`, "method", "grid takes no random params")
	f(`{"method":"random","grid":{"a":[1,2]}}`, "random", "method random needs random params")
	// tpe: a grid-only space, samples, the budget
	f(`{"method":"tpe","grid":{"a":[1,2]},"budget":4}`, "random", "tpe searches random params")
	f(`{"method":"tpe",`+lrRandom+`,"samples":4,"budget":4}`, "samples", "drop samples")
	f(`{"method":"tpe","random":{"x":{"dist":"uniform","min":-1e308,"max":1e308}},"budget":4}`, "random", `param "x": max − min overflows`)
	f(`{"method":"tpe",`+lrRandom+`}`, "budget", "tpe needs")
	f(`{"method":"tpe",`+lrRandom+`,"budget":0}`, "budget", "1..10000")
	f(`{"method":"tpe",`+lrRandom+`,"budget":1000000}`, "budget", "1..10000")
	f(`{"method":"tpe",`+lrRandom+`,"budget":2.5}`, "budget", "integer")
	f(`{"method":"tpe",`+lrRandom+`,"budget":10,"seedCount":3}`, "budget", "multiple of 3")
	f(`{"grid":{"a":[1]},"budget":10}`, "budget", "applies only to method tpe; a grid sweep")
	f(`{`+lrRandom+`,"samples":3,"budget":10}`, "budget", "a random sweep")
	// metric and goal
	f(`{"seedCount":2,"metric":""}`, "metric", "1..128 bytes")
	f(`{"seedCount":2,"metric":" loss"}`, "metric", "surrounding spaces")
	f(`{"seedCount":2,"metric":"`+strings.Repeat("m", 129)+`"}`, "metric", "1..128")
	f(`{"seedCount":2,"metric":7}`, "metric", "a string")
	f(`{"seedCount":2,"goal":"max"}`, "goal", `"maximize" or "minimize"`)
	f(`{"seedCount":2,"goal":""}`, "goal", `"maximize" or "minimize"`)
	f(`{"seedCount":2,"goal":1}`, "goal", `"maximize" or "minimize"`)
	// earlyStop
	f(`{"seedCount":2,"earlyStop":[]}`, "earlyStop", "must be an object")
	f(`{"seedCount":2,"earlyStop":{}}`, "earlyStop.method", "asha or median")
	f(`{"seedCount":2,"earlyStop":{"method":"hyperband","minSteps":10}}`, "earlyStop.method", `"asha" or "median"`)
	f(`{"seedCount":2,"earlyStop":{"method":"asha"}}`, "earlyStop.minSteps", "minSteps ≥ 1")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","minSteps":1.5}}`, "earlyStop.minSteps", "integer")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","minSteps":10,"reductionFactor":1}}`, "earlyStop.reductionFactor", "2..100")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","minSteps":10,"reductionFactor":0}}`, "earlyStop.reductionFactor", "2..100")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","rungs":[100,300,300]}}`, "earlyStop.rungs[2]", "greater than rungs[1] (300)")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","rungs":[100,"x"]}}`, "earlyStop.rungs[1]", "integer")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","rungs":{}}}`, "earlyStop.rungs", "array of steps")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","rungs":[]}}`, "earlyStop.rungs", "1..64")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","rungs":[100],"minSteps":100}}`, "earlyStop.rungs", "not both")
	f(`{"seedCount":2,"earlyStop":{"method":"median","rungs":[100]}}`, "earlyStop.rungs", "only to asha")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","minSteps":10,"metric":""}}`, "earlyStop.metric", "1..128")
	f(`{"seedCount":2,"earlyStop":{"method":"asha","minSteps":10,"goal":"up"}}`, "earlyStop.goal", `"maximize" or "minimize"`)
}

func TestParseSearch_Success(t *testing.T) {
	f := func(body string, method Method, metric string, g goal.Goal, budget int, es *EarlyStop, size int) {
		t.Helper()
		s, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%s): %v", body, err)
		}
		if s.Method != method || s.Metric != metric || s.Goal != g || s.Budget != budget || s.Size() != size {
			t.Errorf("Parse(%s): method %q, metric %q, goal %q, budget %d, size %d; want %q, %q, %q, %d, %d",
				body, s.Method, s.Metric, s.Goal, s.Budget, s.Size(), method, metric, g, budget, size)
		}
		switch {
		case es == nil && s.EarlyStop != nil, es != nil && s.EarlyStop == nil:
			t.Errorf("Parse(%s): earlyStop %+v; want %+v", body, s.EarlyStop, es)
		case es != nil && (s.EarlyStop.Metric != es.Metric || s.EarlyStop.Method != es.Method || s.EarlyStop.Goal != es.Goal ||
			s.EarlyStop.MinSteps != es.MinSteps || s.EarlyStop.ReductionFactor != es.ReductionFactor || !slices.Equal(s.EarlyStop.Rungs, es.Rungs)):
			t.Errorf("Parse(%s): earlyStop %+v; want %+v", body, *s.EarlyStop, *es)
		}
		if n := len(s.Members()); n != size {
			t.Errorf("Parse(%s): %d members expanded, Size says %d", body, n, size)
		}
	}
	// What existing specs mean is unchanged: the method is inferred.
	f(`{"seedCount":2}`, Grid, DefaultMetric, goal.Maximize, 0, nil, 2)
	f(`{"grid":{"a":[1,2]},`+lrRandom+`,"samples":3}`, Random, DefaultMetric, goal.Maximize, 0, nil, 6)
	f(`{"method":"grid","grid":{"a":[1,2]},"metric":"loss","goal":"minimize"}`, Grid, "loss", goal.Minimize, 0, nil, 2)
	f(`{"method":"random",`+lrRandom+`,"samples":3}`, Random, DefaultMetric, goal.Maximize, 0, nil, 3)
	// tpe: budget members, budget ÷ seeds proposals; grid axes are searched,
	// not crossed, so even a large grid fits.
	f(`{"method":"tpe",`+lrRandom+`,"budget":12,"seedCount":3}`, TPE, DefaultMetric, goal.Maximize, 12, nil, 12)
	f(`{"method":"tpe","grid":{"a":`+intList(200)+`,"b":`+intList(200)+`},`+lrRandom+`,"budget":10000}`, TPE, DefaultMetric, goal.Maximize, 10000, nil, 10000)
	// earlyStop takes the sweep's metric and goal unless it gives its own.
	f(`{"seedCount":2,"metric":"loss","goal":"minimize","earlyStop":{"method":"asha","minSteps":100}}`, Grid, "loss", goal.Minimize, 0,
		&EarlyStop{Metric: "loss", Config: earlystop.Config{Method: earlystop.ASHA, Goal: goal.Minimize, MinSteps: 100}}, 2)
	f(`{"seedCount":2,"earlyStop":{"method":"asha","rungs":[10,30,90],"reductionFactor":2,"metric":"success","goal":"maximize"}}`, Grid, DefaultMetric, goal.Maximize, 0,
		&EarlyStop{Metric: "success", Config: earlystop.Config{Method: earlystop.ASHA, Goal: goal.Maximize, ReductionFactor: 2, Rungs: []int64{10, 30, 90}}}, 2)
	f(`{"method":"tpe",`+lrRandom+`,"budget":4,"earlyStop":{"method":"median","minSteps":500,"goal":"minimize","metric":"loss"}}`, TPE, DefaultMetric, goal.Maximize, 4,
		&EarlyStop{Metric: "loss", Config: earlystop.Config{Method: earlystop.Median, Goal: goal.Minimize, MinSteps: 500}}, 4)
	f(`{"seedCount":2,"earlyStop":null,"method":null,"budget":null}`, Grid, DefaultMetric, goal.Maximize, 0, nil, 2)
}

// TestMembersTPE: until proposals follow reports, a tpe sweep is a random
// search of budget members over its space, its grid axes drawn as choices.
func TestMembersTPE(t *testing.T) {
	s := mustParse(t, `{"method":"tpe","grid":{"opt":["adam","sgd"]},`+lrRandom+`,"budget":40,"seedCount":2,"randomSeed":7}`)
	ms := s.Members()
	if len(ms) != 40 {
		t.Fatalf("%d members; want 40", len(ms))
	}
	cells := map[string]int{}
	opts := map[string]bool{}
	for _, m := range ms {
		cells[string(m.Cell)]++
		if !strings.HasPrefix(string(m.Cell), `{"lr":`) || !strings.Contains(string(m.Cell), `,"opt":"`) {
			t.Fatalf("cell %s: want lr and opt", m.Cell)
		}
		opts[strings.Split(string(m.Cell), `"opt":`)[1]] = true
	}
	if len(cells) != 20 {
		t.Errorf("%d distinct cells; want 20 proposals of 2 seeds each", len(cells))
	}
	if !opts[`"adam"}`] || !opts[`"sgd"}`] {
		t.Errorf("the grid axis was not searched: %v", opts)
	}
	again := mustParse(t, `{"method":"tpe","grid":{"opt":["adam","sgd"]},`+lrRandom+`,"budget":40,"seedCount":2,"randomSeed":7}`).Members()
	if memberLines(again) != memberLines(ms) {
		t.Error("the same tpe spec expands differently")
	}
}

func intList(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprint(i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}
