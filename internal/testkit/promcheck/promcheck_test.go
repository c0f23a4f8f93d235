package promcheck

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatalf records the failure instead of
// ending the test, so the helper's own verdict can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestCheck(t *testing.T) {
	Promtool(t)
	f := func(exposition, complaint string) {
		t.Helper()
		r := &recorder{TB: t}
		Check(r, []byte(exposition))
		if complaint == "" && r.failed != "" {
			t.Errorf("clean exposition refused: %s", r.failed)
		}
		if complaint != "" && !strings.Contains(r.failed, complaint) {
			t.Errorf("want a complaint %q, got %q", complaint, r.failed)
		}
	}
	f("# HELP a_total Things.\n# TYPE a_total counter\na_total 1\n", "")
	f("# HELP a Things.\n# TYPE a counter\na 1\n", `counter metrics should have "_total" suffix`)
	f("# HELP a_ms Time.\n# TYPE a_ms gauge\na_ms 1\n", "abbreviated units")
	f("# TYPE a gauge\na 1\n", "no help text")
	f("a{ 1\n", "error while linting")
}

func TestCheckPromQL(t *testing.T) {
	Promtool(t)
	r := &recorder{TB: t}
	CheckPromQL(r, []string{"good", "also good"}, []string{`sum by (le) (rate(a_bucket{x=~"y"}[5m]))`, `up == 1`})
	if r.failed != "" {
		t.Errorf("good PromQL refused: %s", r.failed)
	}
	CheckPromQL(r, []string{"good", "bad"}, []string{`up`, `sum(rate(a[5m])`})
	if !strings.Contains(r.failed, "unclosed left parenthesis") || !strings.Contains(r.failed, "check:expr_1: bad") {
		t.Errorf("bad PromQL: want promtool's complaint naming the expression, got %q", r.failed)
	}
}

func TestValue(t *testing.T) {
	fams := Parse(t, []byte(`# HELP g A gauge.
# TYPE g gauge
g{state="a"} 1
g{state="b"} 2
# HELP h A histogram.
# TYPE h histogram
h_bucket{le="1"} 3
h_bucket{le="+Inf"} 4
h_sum 5
h_count 4
`))
	f := func(name string, labels []string, want float64, present bool) {
		t.Helper()
		got, ok := fams.Value(name, labels...)
		if got != want || ok != present {
			t.Errorf("%s%v = %v, %v; want %v, %v", name, labels, got, ok, want, present)
		}
	}
	f("g", []string{"state", "b"}, 2, true)
	f("g", []string{"state", "c"}, 0, false)
	f("h", nil, 4, true)
	f("nope", nil, 0, false)
	if n := fams.Series("g"); n != 2 {
		t.Errorf("Series(g) = %d, want 2", n)
	}
}
