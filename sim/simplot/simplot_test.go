package simplot

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/sim"
)

func result(t *testing.T, policy string) *sim.Result {
	t.Helper()
	s, err := sim.ParseSynthetic("jobs=2000,users=5,span=720h,seed=2")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sim.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	c := &sim.Cluster{Workers: []sim.WorkerSpec{{ID: "n", Count: 4, GPUs: 8}}}
	r, err := sim.Run(c, s.Trace(), sim.Config{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCurves(t *testing.T) {
	r := result(t, "rlsched")
	c := JCTCDF(r)
	if len(c.X) > maxPoints+1 || len(c.X) < 100 || c.Y[len(c.Y)-1] != 1 {
		t.Fatalf("CDF of %d points ending at %v", len(c.X), c.Y[len(c.Y)-1])
	}
	for i := 1; i < len(c.X); i++ {
		if c.X[i] < c.X[i-1] || c.Y[i] < c.Y[i-1] {
			t.Fatalf("CDF not monotone at %d", i)
		}
	}
	u := Utilisation(r)
	sum := 0.0
	for _, y := range u.Y {
		if y < 0 || y > 100+1e-9 {
			t.Fatalf("utilisation %v%%", y)
		}
		sum += y
	}
	// The mean of the buckets is the allocation over the buckets' span.
	span := float64(len(r.Busy)) * r.Bucket.Seconds()
	want := 100 * r.AllocatedGPUSeconds / (span * float64(r.GPUs))
	if got := sum / float64(len(u.Y)); len(r.Busy) <= maxPoints && (got < want-0.01 || got > want+0.01) {
		t.Errorf("mean utilisation %v%%, want %v%%", got, want)
	}
}

func TestChartsAreSVG(t *testing.T) {
	a, b := result(t, "rlsched"), result(t, "fifo")
	var buf bytes.Buffer
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(what, err)
		}
		if s := buf.String(); !strings.Contains(s, "<svg") || !strings.Contains(s, "rlsched") || !strings.Contains(s, "fifo") {
			t.Errorf("%s: not an SVG with both policies (%d bytes)", what, len(s))
		}
		buf.Reset()
	}
	check("jct", Lines(&buf, "JCT", "hours", "fraction", []Curve{JCTCDF(a), JCTCDF(b)}, true))
	check("util", Lines(&buf, "GPUs", "days", "%", []Curve{Utilisation(a), Utilisation(b)}, false))
	check("users", UserWaits(&buf, []sim.Summary{a.Summarize(), b.Summarize()}))
}
