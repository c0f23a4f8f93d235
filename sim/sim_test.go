package sim

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func job(id, user string, at, dur time.Duration, gpus int) Job {
	return Job{ID: id, User: user, Submit: t0.Add(at), Duration: dur, GPUs: gpus}
}

func cluster(workers, gpus int) *Cluster {
	return &Cluster{Workers: []WorkerSpec{{ID: "w", Count: workers, GPUs: gpus, Slots: 2}}}
}

func run(t *testing.T, c *Cluster, cfg Config, jobs ...Job) (*Result, map[string]JobResult) {
	t.Helper()
	tr := &Trace{}
	for _, j := range jobs {
		tr.add(j)
	}
	r, err := Run(c, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]JobResult{}
	for _, j := range r.Jobs {
		by[j.ID] = j
	}
	return r, by
}

func wantTimes(t *testing.T, by map[string]JobResult, id string, start, end time.Duration) {
	t.Helper()
	j, ok := by[id]
	if !ok {
		t.Fatalf("%s did not finish", id)
	}
	if got := j.Start.Sub(t0); got != start {
		t.Errorf("%s started at +%v, want +%v", id, got, start)
	}
	if got := j.End.Sub(t0); got != end {
		t.Errorf("%s ended at +%v, want +%v", id, got, end)
	}
}

func TestRunPlacesBestFitAndBackfills(t *testing.T) {
	// One worker of 4 GPUs: a waits for a's 3 GPUs; b (2 GPUs) cannot
	// fit beside a, c (1 GPU) backfills past b.
	_, by := run(t, cluster(1, 4), Config{Policy: Policy{FIFO: true, BackfillReserve: -1, PreemptCooldown: -1}},
		job("a", "u", 0, time.Hour, 3),
		job("b", "u", time.Minute, time.Hour, 2),
		job("c", "u", 2*time.Minute, 10*time.Minute, 1),
	)
	wantTimes(t, by, "a", 0, time.Hour)
	wantTimes(t, by, "c", 2*time.Minute, 12*time.Minute)
	wantTimes(t, by, "b", time.Hour, 2*time.Hour)
}

func TestRunFairShareServesTheLighterUser(t *testing.T) {
	// One GPU. heavy has used it for an hour when light's run and heavy's
	// second arrive together (heavy's first): fair share serves light first,
	// FIFO serves the older.
	jobs := []Job{
		job("h1", "heavy", 0, time.Hour, 1),
		job("h2", "heavy", time.Minute, time.Hour, 1),
		job("l1", "light", 2*time.Minute, time.Hour, 1),
	}
	_, fair := run(t, cluster(1, 1), Config{}, jobs...)
	wantTimes(t, fair, "l1", time.Hour, 2*time.Hour)
	wantTimes(t, fair, "h2", 2*time.Hour, 3*time.Hour)
	_, fifo := run(t, cluster(1, 1), Config{Policy: Policy{FIFO: true}}, jobs...)
	wantTimes(t, fifo, "h2", time.Hour, 2*time.Hour)
	wantTimes(t, fifo, "l1", 2*time.Hour, 3*time.Hour)
}

func TestRunPreemptionLosesWorkSinceTheCheckpoint(t *testing.T) {
	low := job("low", "a", 0, 2*time.Hour, 1)
	low.Preemptible = true
	high := job("high", "b", 50*time.Minute, time.Hour, 1)
	high.Priority = 5
	r, by := run(t, cluster(1, 1), Config{CheckpointEvery: 20 * time.Minute}, low, high)
	// low is preempted at 50 min having kept 40 min: it loses 10, and runs
	// its last 80 min after high.
	wantTimes(t, by, "high", 50*time.Minute, 110*time.Minute)
	wantTimes(t, by, "low", 0, 190*time.Minute)
	if j := by["low"]; j.Preemptions != 1 || j.Lost != 10*time.Minute {
		t.Errorf("low: %d preemptions, lost %v; want 1 and 10m", j.Preemptions, j.Lost)
	}
	if r.Preemptions != 1 {
		t.Errorf("%d preemptions, want 1", r.Preemptions)
	}
	// Without preemption high waits for low.
	_, by = run(t, cluster(1, 1), Config{Policy: Policy{PreemptCooldown: -1}}, low, high)
	wantTimes(t, by, "high", 2*time.Hour, 3*time.Hour)
	// Without checkpoints low starts over.
	_, by = run(t, cluster(1, 1), Config{}, low, high)
	wantTimes(t, by, "low", 0, 110*time.Minute+2*time.Hour)
}

func TestRunFaultRequeuesWithItsCheckpoint(t *testing.T) {
	c := cluster(2, 1)
	c.Faults = []Fault{{Worker: "w-1", At: Duration(30 * time.Minute), For: Duration(time.Hour)}}
	_, by := run(t, c, Config{CheckpointEvery: 25 * time.Minute},
		job("a", "u", 0, time.Hour, 1),             // on w-1 (best fit among equals: the first by id)
		job("b", "u", time.Minute, 2*time.Hour, 1), // on w-2
	)
	// a loses 5 min at the fault and waits for w-2 or w-1's return at
	// 90 min, whichever first: w-1 at +90, then runs its last 35 min.
	wantTimes(t, by, "a", 0, 125*time.Minute)
	if j := by["a"]; j.Faults != 1 || j.Lost != 5*time.Minute {
		t.Errorf("a: %d faults, lost %v; want 1 and 5m", j.Faults, j.Lost)
	}
	wantTimes(t, by, "b", time.Minute, 121*time.Minute)
}

func TestRunReportsEveryJobNotSimulated(t *testing.T) {
	two := 2
	c := cluster(1, 4)
	c.Quotas = map[string]Cap{"capped": {GPUs: &two}}
	r, by := run(t, c, Config{},
		job("fits", "u", 0, time.Minute, 4),
		job("huge", "u", 0, time.Minute, 8),
		job("neg", "u", 0, -time.Minute, 1),
		job("overquota", "capped", 0, time.Minute, 3),
	)
	if _, ok := by["fits"]; !ok || len(r.Jobs) != 1 {
		t.Fatalf("finished %v, want only fits", r.Jobs)
	}
	why := map[string]string{}
	for _, s := range r.Skipped {
		why[s.ID] = s.Reason
	}
	for id, want := range map[string]string{"huge": "no worker has that many", "neg": "negative", "overquota": "quota"} {
		if !strings.Contains(why[id], want) {
			t.Errorf("%s skipped for %q, want it to say %q", id, why[id], want)
		}
	}
	r, _ = run(t, &Cluster{}, Config{}, job("a", "u", 0, time.Minute, 0))
	if len(r.Skipped) != 1 || !strings.Contains(r.Skipped[0].Reason, "no workers") {
		t.Errorf("with no workers: %v", r.Skipped)
	}
}

func TestRunReservationHoldsForTheLongWaiter(t *testing.T) {
	// One worker of 2 GPUs, kept busy by a stream of 1-GPU runs that
	// overlap: the 2-GPU run starts only once it reserves the worker.
	var jobs []Job
	for i := range 40 {
		jobs = append(jobs, job("s"+string(rune('a'+i%26))+string(rune('a'+i/26)), "u", time.Duration(i)*5*time.Minute, 8*time.Minute, 1))
	}
	jobs = append(jobs, job("big", "v", 3*time.Minute, 10*time.Minute, 2))
	_, none := run(t, cluster(1, 2), Config{Policy: Policy{FIFO: true, BackfillReserve: -1, PreemptCooldown: -1}}, jobs...)
	_, resv := run(t, cluster(1, 2), Config{Policy: Policy{FIFO: true, BackfillReserve: 10 * time.Minute, PreemptCooldown: -1}}, jobs...)
	if w := resv["big"].Wait(); w > 30*time.Minute {
		t.Errorf("with reservations big waited %v, want under 30m", w)
	}
	if none["big"].Wait() <= resv["big"].Wait() {
		t.Errorf("without reservations big waited %v, with %v: want longer without", none["big"].Wait(), resv["big"].Wait())
	}
}

func TestSummary(t *testing.T) {
	r, _ := run(t, cluster(1, 2), Config{},
		job("a", "u", 0, time.Hour, 2),
		job("b", "v", 0, time.Hour, 2),
	)
	s := r.Summarize()
	if s.Jobs != 2 || s.Makespan != 7200 || s.Utilisation != 1 || s.Allocation != 1 {
		t.Fatalf("summary %+v", s)
	}
	if s.JCT.Mean != 1.5*3600 || s.Wait.Max != 3600 || s.LongestWait != 3600 || s.Fairness != 2 {
		t.Errorf("jct %+v wait %+v longest %v fairness %v", s.JCT, s.Wait, s.LongestWait, s.Fairness)
	}
}

func TestRunSJFServesTheShortestFirst(t *testing.T) {
	sjf, err := ParsePolicy("sjf")
	if err != nil {
		t.Fatal(err)
	}
	jobs := []Job{
		job("running", "u", 0, time.Hour, 1),
		job("long", "u", time.Minute, 3*time.Hour, 1),
		job("short", "u", 2*time.Minute, 10*time.Minute, 1),
	}
	_, by := run(t, cluster(1, 1), Config{Policy: sjf}, jobs...)
	wantTimes(t, by, "short", time.Hour, 70*time.Minute)
	wantTimes(t, by, "long", 70*time.Minute, 250*time.Minute)
	_, by = run(t, cluster(1, 1), Config{Policy: Policy{FIFO: true}}, jobs...)
	wantTimes(t, by, "long", time.Hour, 4*time.Hour)
}

func TestRunTiresiasDemotesAndPreemptsByAttainedService(t *testing.T) {
	tir, err := ParsePolicy("tiresias")
	if err != nil {
		t.Fatal(err)
	}
	// old has attained 2 GPU-hours (level 1) when fresh arrives (level 0):
	// fresh preempts it; old keeps its checkpointed 2 h and ends after.
	r, by := run(t, cluster(1, 1), Config{Policy: tir, CheckpointEvery: 30 * time.Minute},
		job("old", "u", 0, 3*time.Hour, 1),
		job("fresh", "v", 2*time.Hour, 30*time.Minute, 1),
	)
	wantTimes(t, by, "fresh", 2*time.Hour, 150*time.Minute)
	wantTimes(t, by, "old", 0, 210*time.Minute)
	if r.Preemptions != 1 || by["old"].Lost != 0 {
		t.Errorf("%d preemptions, old lost %v; want 1 and 0", r.Preemptions, by["old"].Lost)
	}
	// Two runs at one level do not preempt each other.
	_, by = run(t, cluster(1, 1), Config{Policy: tir},
		job("a", "u", 0, 30*time.Minute, 1),
		job("b", "v", 10*time.Minute, 30*time.Minute, 1),
	)
	wantTimes(t, by, "b", 30*time.Minute, time.Hour)
}

func TestRunBusyOverTime(t *testing.T) {
	// A 2-GPU job for the first 90 minutes, then a 1-GPU one for 30: the
	// buckets (a minute: the span of submissions is short) hold 120, then
	// 60 GPU-seconds each.
	r, _ := run(t, cluster(1, 2), Config{}, job("a", "u", 0, 90*time.Minute, 2), job("b", "u", 90*time.Minute, 30*time.Minute, 1))
	if r.Bucket != time.Minute || len(r.Busy) != 120 || r.Busy[0] != 120 || r.Busy[89] != 120 || r.Busy[90] != 60 || r.Busy[119] != 60 {
		t.Fatalf("bucket %v, %d buckets: %v", r.Bucket, len(r.Busy), r.Busy)
	}
}

func TestSummaryFinishTimeFairness(t *testing.T) {
	// Two users, one 2-GPU cluster. Each 1-GPU job gets its equal half at
	// once: ρ 1 for both.
	r, _ := run(t, cluster(1, 2), Config{}, job("a", "u", 0, time.Hour, 1), job("b", "v", 0, time.Hour, 1))
	if s := r.Summarize(); s.RhoMax != 1 || s.RhoMean != 1 {
		t.Errorf("equal shares: ρ max %v, mean %v; want 1", s.RhoMax, s.RhoMean)
	}
	// Each asks for the whole cluster: a runs first (1 h, on a share of 1
	// GPU over 2 users it would take 2 h: ρ 0.5); b ends at 2 h, with 1.5
	// users on average over its lifetime (alone it takes 1.5 h: ρ 4/3).
	r, _ = run(t, cluster(1, 2), Config{}, job("a", "u", 0, time.Hour, 2), job("b", "v", 0, time.Hour, 2))
	s := r.Summarize()
	rho := map[string]float64{}
	for _, u := range s.Users {
		rho[u.User] = u.Rho
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	if !near(rho["u"], 0.5) || !near(rho["v"], 4.0/3) || !near(s.RhoMax, 4.0/3) || !near(s.RhoMean, (0.5+4.0/3)/2) {
		t.Errorf("whole-cluster jobs: users %v, ρ max %v, mean %v; want u 0.5, v 4/3", rho, s.RhoMax, s.RhoMean)
	}
	// One user: N is 1, the whole cluster its share; b waits for a.
	r, _ = run(t, cluster(1, 2), Config{}, job("a", "u", 0, time.Hour, 2), job("b", "u", 30*time.Minute, time.Hour, 1))
	// a: ρ 1; b (submitted at 30 m, run 1 h–2 h): 1.5 h for 1 h alone.
	if s := r.Summarize(); !near(s.RhoMax, 1.25) {
		t.Errorf("one user: ρ max %v, want (1 + 1.5)/2", s.RhoMax)
	}
}

func TestRunMultifactorWeighsAgeAndFairShare(t *testing.T) {
	slurm, err := ParsePolicy("slurm")
	if err != nil {
		t.Fatal(err)
	}
	// Short waits: fair share decides, the light user's run goes first
	// (FIFO would start heavy's older one).
	jobs := []Job{
		job("h1", "heavy", 0, time.Hour, 1),
		job("h2", "heavy", time.Minute, time.Hour, 1),
		job("l1", "light", 2*time.Minute, time.Hour, 1),
	}
	_, by := run(t, cluster(1, 1), Config{Policy: slurm}, jobs...)
	wantTimes(t, by, "l1", time.Hour, 2*time.Hour)
	wantTimes(t, by, "h2", 2*time.Hour, 3*time.Hour)
	// A run that waited past the age cap goes first although its owner used
	// everything (rlsched's fair share would start light's).
	week := MultifactorMaxAge
	jobs = []Job{
		job("h1", "heavy", 0, week+time.Hour, 1),
		job("h2", "heavy", time.Minute, time.Hour, 1),
		job("l1", "light", week, time.Hour, 1),
	}
	_, by = run(t, cluster(1, 1), Config{Policy: slurm}, jobs...)
	wantTimes(t, by, "h2", week+time.Hour, week+2*time.Hour)
	wantTimes(t, by, "l1", week+2*time.Hour, week+3*time.Hour)
	_, by = run(t, cluster(1, 1), Config{}, jobs...)
	wantTimes(t, by, "l1", week+time.Hour, week+2*time.Hour)
}

func TestRunSpanEndsAtTheLastChange(t *testing.T) {
	// A 3-hour job under Tiresias has a level change due at 10 GPU-hours,
	// stale once it ends: the span, and so the allocation, end with it.
	tir, err := ParsePolicy("tiresias")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{tir, {FIFO: true}} {
		r, _ := run(t, cluster(1, 2), Config{Policy: p}, job("a", "u", 0, 3*time.Hour, 1))
		if s := r.Summarize(); r.End != t0.Add(3*time.Hour) || s.Allocation != 0.5 {
			t.Errorf("%s: ends at +%v, allocation %v; want +3h and 0.5", p.Order, r.End.Sub(t0), s.Allocation)
		}
	}
}

// TestRunSharesCoresMemoryAndTypes: the requests of issue 26 and 28 are
// the planner's in simulation too (issue 31). Four quarter-GPU jobs share
// the one GPU at once, and rounded up to whole GPUs run one after the
// other; two CPU jobs of 3 cores each on a 4-core worker run in turn; a
// job asking for a GPU type or more memory than any worker has is skipped
// with the planner's no_worker reason.
func TestRunSharesCoresMemoryAndTypes(t *testing.T) {
	c := &Cluster{Workers: []WorkerSpec{{ID: "w", GPUs: 1, GPUType: "A100", GPUMemoryMB: 40000, Slots: 4, Cores: 4, MemoryMB: 8000}}}
	cfg := Config{Policy: Policy{FIFO: true, BackfillReserve: -1, PreemptCooldown: -1}}
	quarter := func(id string) Job {
		j := job(id, "u", 0, time.Hour, 0)
		j.GPUFraction, j.GPUType = 0.25, []string{"a100"}
		return j
	}
	cpu := func(id string) Job {
		j := job(id, "u", 0, time.Hour, 0)
		j.CPUMillis, j.MemoryMB = 3000, 1000
		return j
	}
	v100, big := job("v100", "u", 0, time.Hour, 1), job("big", "u", 0, time.Hour, 0)
	v100.GPUType, big.MemoryMB = []string{"V100"}, 16000
	r, by := run(t, c, cfg, quarter("q1"), quarter("q2"), quarter("q3"), quarter("q4"), cpu("c1"), cpu("c2"), v100, big)
	for _, id := range []string{"q1", "q2", "q3", "q4"} {
		wantTimes(t, by, id, 0, time.Hour)
	}
	wantTimes(t, by, "c1", 0, time.Hour)
	wantTimes(t, by, "c2", time.Hour, 2*time.Hour)
	why := map[string]string{}
	for _, s := range r.Skipped {
		why[s.ID] = s.Reason
	}
	if len(why) != 2 || !strings.Contains(why["v100"], "V100") || !strings.Contains(why["big"], "memory") {
		t.Fatalf("skipped: %v", why)
	}
	if got := r.AllocatedGPUSeconds; got != 3600 {
		t.Errorf("allocated %v GPU-seconds, want 3600 (four quarters for an hour)", got)
	}

	tr := &Trace{}
	for _, id := range []string{"q1", "q2", "q3", "q4"} {
		tr.add(quarter(id))
	}
	tr.WholeGPUs()
	r, err := Run(c, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Time
	for _, j := range r.Jobs {
		if j.End.After(last) {
			last = j.End
		}
	}
	if got := last.Sub(t0); got != 4*time.Hour {
		t.Errorf("rounded up to whole GPUs, the last ended at +%v, want +4h", got)
	}
}
