package gpuwatch

import (
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

// utils makes a sample of GPUs 0..n-1 with these utilisations and 100 MiB
// used each.
func utils(u ...int) Sample {
	s := Sample{}
	for i, v := range u {
		s.GPUs = append(s.GPUs, GPU{Index: i, UtilPct: v, MemoryUsedMB: 100})
	}
	return s
}

func TestRunSeries(t *testing.T) {
	f := func(s Sample, gpus []int, want Series) {
		t.Helper()
		if got := RunSeries(s, gpus); got != want {
			t.Fatalf("RunSeries(%+v, %v) = %+v, want %+v", s, gpus, got, want)
		}
	}
	s := Sample{GPUs: []GPU{
		{Index: 0, UtilPct: 10, MemoryUsedMB: 1000},
		{Index: 1, UtilPct: 35, MemoryUsedMB: 3000},
		{Index: 2, UtilPct: Unknown, MemoryUsedMB: 500},
		{Index: 3, UtilPct: Unknown, MemoryUsedMB: Unknown},
	}}
	f(s, []int{0, 1}, Series{UtilPct: 22.5, HasUtil: true, MemoryMB: 4000, HasMemory: true})
	f(s, []int{1}, Series{UtilPct: 35, HasUtil: true, MemoryMB: 3000, HasMemory: true})
	// Unknown values are left out of the mean and the sum.
	f(s, []int{0, 2}, Series{UtilPct: 10, HasUtil: true, MemoryMB: 1500, HasMemory: true})
	f(s, []int{2, 3}, Series{MemoryMB: 500, HasMemory: true})
	f(s, []int{3, 7}, Series{})
	f(s, nil, Series{})
}

func TestForeignGPUs(t *testing.T) {
	s := utils(0, 0, 0, 0)
	s.GPUs[1].Foreign = []Proc{{PID: 1}}
	s.GPUs[3].Foreign = []Proc{{PID: 2}, {PID: 3}}
	if got := ForeignGPUs(s, nil); !reflect.DeepEqual(got, []int{1, 3}) {
		t.Fatalf("ForeignGPUs = %v", got)
	}
	if got := ForeignGPUs(utils(0), nil); got != nil {
		t.Fatalf("ForeignGPUs without foreign = %v", got)
	}
}

func TestParseIdleAction(t *testing.T) {
	for in, want := range map[string]bool{"": false, "warn": false, "WARN": false, "cancel": true, " Cancel ": true} {
		if got, err := ParseIdleAction(in); err != nil || got != want {
			t.Fatalf("ParseIdleAction(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseIdleAction("kill"); err == nil || err.Error() != `IDLE_GPU_ACTION="kill": want warn or cancel` {
		t.Fatalf("ParseIdleAction(kill): %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{IdleUtilPct: 101, MaxGap: 1}, {IdleUtilPct: -1, MaxGap: 1}, {IdleAfter: -1, MaxGap: 1}, {}} {
		if c.Validate() == nil {
			t.Fatalf("Validate(%+v) = nil", c)
		}
	}
}

// step is one sample in a scenario: its time, utilisations, the runs
// running, and what the Watch must say.
type step struct {
	sec      int
	sample   Sample
	running  []Run
	warnings []Warning
	cancels  []Cancel
}

func play(t *testing.T, cfg Config, steps []step) *Watch {
	t.Helper()
	w := NewWatch(cfg)
	var out Result
	for i, st := range steps {
		w.Observe(at(st.sec), st.sample, st.running, &out)
		if !equalWarnings(out.Warnings, st.warnings) || !equalCancels(out.Cancels, st.cancels) {
			t.Fatalf("step %d (t=%d s): warnings %+v cancels %+v\nwant warnings %+v cancels %+v",
				i, st.sec, out.Warnings, out.Cancels, st.warnings, st.cancels)
		}
	}
	return w
}

func equalWarnings(a, b []Warning) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}
func equalCancels(a, b []Cancel) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func TestIdle(t *testing.T) {
	cfg := Config{IdleUtilPct: 5, IdleAfter: 60 * time.Second, MaxGap: 30 * time.Second}
	run := []Run{{ID: "r1", GPUs: []int{0, 1}}}
	idleWarn := func(secs string) []Warning {
		return []Warning{{Run: "r1", Code: CodeIdle, Message: "GPUs 0, 1 idle (under 5% utilisation) for " + secs + " s"}}
	}

	// Idle for 60 s: one warning, not repeated while it stays idle.
	play(t, cfg, []step{
		{sec: 0, sample: utils(0, 4), running: run},
		{sec: 20, sample: utils(1, 0), running: run},
		{sec: 40, sample: utils(0, 0), running: run},
		{sec: 60, sample: utils(0, 0), running: run, warnings: idleWarn("60")},
		{sec: 80, sample: utils(0, 0), running: run},
		{sec: 1000, sample: utils(0, 0), running: run}, // after a gap: a new stretch
		{sec: 1020, sample: utils(0, 0), running: run},
	})

	// One busy GPU, or one that did not report, or a GPU missing from the
	// sample, keeps the run from being idle.
	play(t, cfg, []step{
		{sec: 0, sample: utils(0, 0), running: run},
		{sec: 20, sample: utils(0, 5), running: run},
		{sec: 40, sample: utils(0, 0), running: run},
		{sec: 60, sample: utils(0, Unknown), running: run},
		{sec: 80, sample: utils(0, 0), running: run},
		{sec: 100, sample: utils(0), running: run},
		{sec: 120, sample: utils(0, 0), running: run},
		{sec: 150, sample: utils(0, 0), running: run},
		{sec: 180, sample: utils(0, 0), running: run, warnings: idleWarn("60")},
	})

	// Busy again resets: a second full stretch warns again.
	play(t, cfg, []step{
		{sec: 0, sample: utils(0, 0), running: run},
		{sec: 30, sample: utils(0, 0), running: run},
		{sec: 60, sample: utils(0, 0), running: run, warnings: idleWarn("60")},
		{sec: 90, sample: utils(80, 0), running: run},
		{sec: 120, sample: utils(0, 0), running: run},
		{sec: 150, sample: utils(0, 0), running: run},
		{sec: 175, sample: utils(0, 0), running: run},
		{sec: 200, sample: utils(0, 0), running: run, warnings: idleWarn("80")},
	})

	// A stale or repeated sample does not advance the stretch.
	play(t, cfg, []step{
		{sec: 0, sample: utils(0, 0), running: run},
		{sec: 30, sample: utils(0, 0), running: run},
		{sec: 10, sample: utils(90, 90), running: run},
		{sec: 30, sample: utils(90, 90), running: run},
		{sec: 60, sample: utils(0, 0), running: run, warnings: idleWarn("60")},
	})

	// A run that leaves is forgotten: back, it starts over.
	other := []Run{{ID: "r2", GPUs: []int{2}}}
	w := play(t, cfg, []step{
		{sec: 0, sample: utils(0, 0, 0), running: run},
		{sec: 30, sample: utils(0, 0, 0), running: other},
		{sec: 50, sample: utils(0, 0, 0), running: append(other, run...)},
		{sec: 70, sample: utils(0, 0, 0), running: append(other, run...)},
		{sec: 90, sample: utils(0, 0, 0), running: append(other, run...),
			warnings: []Warning{{Run: "r2", Code: CodeIdle, Message: "GPU 2 idle (under 5% utilisation) for 60 s"}}},
	})
	if since, ok := w.IdleSince("r1"); !ok || !since.Equal(at(50)) {
		t.Fatalf("IdleSince(r1) = %v, %v; want t=50 s", since, ok)
	}
	if _, ok := w.IdleSince("nope"); ok {
		t.Fatal("IdleSince of an unknown run")
	}

	// A run without GPUs, or the rule turned off, never warns.
	play(t, cfg, []step{{sec: 0, sample: utils(0), running: []Run{{ID: "cpu"}}}, {sec: 100, sample: utils(0), running: []Run{{ID: "cpu"}}}})
	off := cfg
	off.IdleAfter = 0
	play(t, off, []step{{sec: 0, sample: utils(0, 0), running: run}, {sec: 100, sample: utils(0, 0), running: run}})
}

func TestIdleCancel(t *testing.T) {
	cfg := Config{IdleUtilPct: 5, IdleAfter: 60 * time.Second, MaxGap: 30 * time.Second, IdleCancel: true}
	run := []Run{{ID: "r1", GPUs: []int{3}}}
	s := Sample{GPUs: []GPU{{Index: 3, UtilPct: 0, MemoryUsedMB: 0}}}
	busy := Sample{GPUs: []GPU{{Index: 3, UtilPct: 50, MemoryUsedMB: 0}}}
	warn := func(secs string) []Warning {
		return []Warning{{Run: "r1", Code: CodeIdle, Message: "GPU 3 idle (under 5% utilisation) for " + secs + " s"}}
	}
	play(t, cfg, []step{
		{sec: 0, sample: s, running: run},
		{sec: 25, sample: s, running: run},
		{sec: 50, sample: s, running: run},
		{sec: 62, sample: s, running: run, warnings: warn("62"), cancels: []Cancel{{Run: "r1", Error: "idle GPU for 62 s"}}},
		// Still RUNNING during its grace: no second cancel, even after a
		// second idle stretch.
		{sec: 70, sample: busy, running: run},
		{sec: 90, sample: s, running: run},
		{sec: 110, sample: s, running: run},
		{sec: 130, sample: s, running: run},
		{sec: 150, sample: s, running: run, warnings: warn("60")},
	})
}

func TestForeignWarnings(t *testing.T) {
	cfg := DefaultConfig()
	runs := []Run{{ID: "a", GPUs: []int{0, 1}}, {ID: "b", GPUs: []int{2}}}
	s := utils(50, 50, 50, 50)
	bob := Proc{PID: 4242, User: "bob", Command: "python secret.py --token x", MemoryMB: 1200}
	hidden := Proc{PID: 77, MemoryMB: Unknown}
	withForeign := func(gpu int, procs ...Proc) Sample {
		c := utils(50, 50, 50, 50)
		c.GPUs[gpu].Foreign = procs
		return c
	}
	bobMsg := "GPU 1 has a process rlsched did not start: pid 4242 of user bob, 1200 MiB"
	w := play(t, cfg, []step{
		{sec: 0, sample: s, running: runs},
		{sec: 10, sample: withForeign(1, bob), running: runs, warnings: []Warning{{Run: "a", Code: CodeForeign, Message: bobMsg}}},
		{sec: 20, sample: withForeign(1, bob), running: runs}, // once per run per process
		{sec: 30, sample: s, running: runs},
		{sec: 40, sample: withForeign(1, bob), running: runs}, // back: still once
		{sec: 50, sample: withForeign(1, bob, hidden), running: runs, warnings: []Warning{{Run: "a", Code: CodeForeign,
			Message: "GPU 1 has a process rlsched did not start: pid 77 of an unknown user"}}},
		// On a GPU of no run: no warning, but the planner hears of it.
		{sec: 60, sample: withForeign(3, Proc{PID: 9, User: "eve", MemoryMB: 1}), running: runs},
	})
	_ = w
	var out Result
	w.Observe(at(70), withForeign(3, Proc{PID: 9}), runs, &out)
	if !reflect.DeepEqual(out.Foreign, []int{3}) || len(out.Warnings) != 0 {
		t.Fatalf("foreign GPU of no run: %+v", out)
	}
}

func TestPoints(t *testing.T) {
	w := NewWatch(DefaultConfig())
	s := Sample{GPUs: []GPU{{Index: 0, UtilPct: 30, MemoryUsedMB: 1000}, {Index: 1, UtilPct: 50, MemoryUsedMB: 3000},
		{Index: 2, UtilPct: Unknown, MemoryUsedMB: Unknown}}}
	var out Result
	w.Observe(at(0), s, []Run{{ID: "a", GPUs: []int{0, 1}}, {ID: "b", GPUs: []int{2}}, {ID: "c"}}, &out)
	want := []Point{{"a", MetricUtilization, 40}, {"a", MetricMemory, 4000}}
	if !reflect.DeepEqual(out.Points, want) {
		t.Fatalf("points %+v, want %+v", out.Points, want)
	}
}

// A run's use of cores and memory gives its sys/cpu_cores and sys/memory_mb
// points, with GPUs or without; a run the worker did not report has none.
func TestUsagePoints(t *testing.T) {
	w := NewWatch(DefaultConfig())
	s := Sample{GPUs: []GPU{{Index: 0, UtilPct: 30, MemoryUsedMB: 1000}}}
	var out Result
	w.Observe(at(0), s, []Run{{ID: "a", GPUs: []int{0}, Usage: Usage{CPUMillicores: 2500, MemoryMB: 700, Known: true}},
		{ID: "b", Usage: Usage{CPUMillicores: 980, MemoryMB: 12, Known: true}}, {ID: "c"}}, &out)
	want := []Point{{"a", MetricUtilization, 30}, {"a", MetricMemory, 1000}, {"a", MetricCPUCores, 2.5}, {"a", MetricMemoryRun, 700},
		{"b", MetricCPUCores, 0.98}, {"b", MetricMemoryRun, 12}}
	if !reflect.DeepEqual(out.Points, want) {
		t.Fatalf("points %+v, want %+v", out.Points, want)
	}
}
