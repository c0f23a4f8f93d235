package main

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/sim"
)

// openbSlice is 400 pods of Alibaba's 2023 GPU trace (bench/testdata/README.md
// says which, from where, under which licence).
//
//go:embed testdata/openb_pod_list_gpuspec33_slice.csv
var openbSlice []byte

// replayKind is one kind of simulated worker of the replay's cluster,
// after the machines of the trace's own node list (openb_node_list_gpu_node.csv:
// 8 × G2 with 96 cores and 384 GiB, 2 × T4 with 104 cores and 512 GiB, ...).
type replayKind struct {
	prefix      string
	count, gpus int
	model       string // the GPU's name as the worker reports it: the trace's gpu_spec names
	gpuMemoryMB int64
	cores       int64
	memoryMB    int64
	slots       int
	labels      map[string]string
}

var replayCluster = []replayKind{
	{prefix: "g2", count: 1, gpus: 8, model: "G2", gpuMemoryMB: 32768, cores: 96, memoryMB: 393216, slots: 16},
	{prefix: "t4", count: 3, gpus: 2, model: "T4", gpuMemoryMB: 15360, cores: 104, memoryMB: 524288, slots: 16},
	{prefix: "p100", count: 1, gpus: 2, model: "P100", gpuMemoryMB: 16384, cores: 64, memoryMB: 262144, slots: 16},
	{prefix: "v100m32", count: 1, gpus: 4, model: "V100M32", gpuMemoryMB: 32768, cores: 48, memoryMB: 376832, slots: 16},
	{prefix: "cpu", count: 2, cores: 64, memoryMB: 262144, slots: 16, labels: map[string]string{"pool": "cpu"}},
}

// The replay's clock: durations run 300 times faster than in the trace
// (3,000 with -quick), arrivals replayDense times faster still, so that
// 20 GPUs see the load of a cluster about 6 × larger (the trace's pods
// are a sample of a cluster of 6,200 GPUs; at the trace's own pace 20
// GPUs are seldom full, and any placement looks alike).
const replayDense = 6

// runReplay replays the trace slice through a real master and simulated
// workers, twice: with each pod's share of a GPU as a fractional run
// (gpu_milli/1000), and with every share rounded up to a whole GPU. Each
// pod is a run of its cores, memory, GPUs and GPU types (gpuType) that
// lasts its trace duration, compressed.
func runReplay(e *env) (*report, error) {
	pods, err := sim.ReadOpenBPods(bytes.NewReader(openbSlice))
	if err != nil {
		return nil, err
	}
	compress := pick(e, 3000.0, 300.0)
	gpus := 0
	for _, k := range replayCluster {
		gpus += k.count * k.gpus
	}
	span := pods.Pods[len(pods.Pods)-1].Created.Sub(pods.Pods[0].Created)
	window := time.Duration(float64(span) / (compress * replayDense))
	rep := &report{size: fmt.Sprintf("%d pods of the trace (%d shared a GPU), %.1f hours of it in %.0f s, on %d simulated workers with %d GPUs",
		len(pods.Pods), countShares(pods.Pods), span.Hours(), window.Seconds(), workersOf(replayCluster), gpus)}
	var res [2]*replayResult
	for i, rounded := range []bool{false, true} {
		r, err := replayOnce(e, pods.Pods, rounded, compress, window)
		if err != nil {
			return nil, err
		}
		res[i] = r
	}
	t := rep.newTable("The same pods with their GPU shares, and with every share rounded up to a whole GPU (waits in trace time)",
		"pods as", "GPU allocation", "GPUs held", "started", "mean wait", "p95 wait", "never fit (no_worker)", "still waiting at the end", "over-committed GPUs (store; workers)")
	for i, r := range res {
		name := "fractions kept (gpus 0.46)"
		if i == 1 {
			name = "rounded up to whole GPUs (gpus 1)"
		}
		t.add(name, pct(r.alloc), pct(r.held), strconv.Itoa(r.started), secs(r.meanWait), secs(r.p95Wait),
			strconv.Itoa(len(r.neverFit)), strconv.Itoa(r.waiting), fmt.Sprintf("%d; %d", r.overStore, r.overFleet))
	}
	f, u := res[0], res[1]
	rep.goal(f.alloc-u.alloc >= 0.10, "GPU allocation ≥ 10 points above rounding up: %s against %s (%+.1f points)", pct(f.alloc), pct(u.alloc), 100*(f.alloc-u.alloc))
	rep.goal(f.meanWait < u.meanWait, "mean wait lower with fractions: %s against %s", secs(f.meanWait), secs(u.meanWait))
	rep.goal(f.overStore+f.overFleet+u.overStore+u.overFleet == 0, "no GPU's shares over-committed, from the store's runs and from the workers' own count: %d, %d (fractions), %d, %d (rounded up)",
		f.overStore, f.overFleet, u.overStore, u.overFleet)
	for _, r := range res {
		if r.overWhy != "" {
			rep.note("over-commit: %s", r.overWhy)
		}
	}
	rep.note("Cluster (after the trace's node list): %s. Pods are submitted through POST /api/train at their creation time (relative to the first) divided by %.0f × %d and run for their duration (deletion − scheduling) divided by %.0f; %d pods never scheduled or never ended in the trace are left out (as `rlsched sim` does). One submitting user (the trace has none), so the queue's order is age, with the planner's backfill.",
		describeCluster(replayCluster), compress, replayDense, compress, len(pods.Skipped))
	rep.note("GPU allocation: the GPUs the running pods asked for in the trace (a share counted as its gpu_milli/1000, also when rounded up) over the cluster's GPUs, integrated over the window of submissions (%s real, %.1f trace hours); GPUs held: what the runs held (a rounded-up share holds a whole GPU). Waits run from the submission to the start the worker reported (`createdAt` to `startedAt`), × %.0f; a run that never started counts with its wait until the end of the replay (a lower bound), a run no worker can hold (no_worker: its GPU type, cores or memory no worker has) is counted apart and in no wait. The replay ends when every run has started or waits with no_worker, or one more window after the last submission.",
		ms(window), span.Hours()/replayDense, compress)
	rep.note("Submissions were at most %s (fractions kept) and %s (rounded up) behind their times.", ms(f.late), ms(u.late))
	rep.note("Over-commits: from the store, every run's GPUs, share and memory share between its startedAt and finishedAt on each worker's GPU (a whole run alone, shares ≤ 1.00, their memory ≤ the GPU's); from the simulated workers, each ExecuteTask checked against the runs the worker holds and has not reported ended.")
	if len(f.neverFit) > 0 {
		rep.note("Never fit, with the master's reason (fractions kept): %s", countReasons(f.neverFit))
	}
	rep.result = result{metric: "replay_gpu_allocation_pct", value: 100 * f.alloc, unit: "%", ref: "rounded_up", refValue: 100 * u.alloc}
	return rep, nil
}

type replayResult struct {
	alloc, held          float64
	started, waiting     int
	meanWait, p95Wait    float64  // trace seconds
	neverFit             []string // the master's reasons
	overStore, overFleet int64
	overWhy              string
	late                 time.Duration // the latest submission, behind its time
}

// replayTask is what the replay reads back of each run.
type replayTask struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Status        string     `json:"status"`
	GPUs          float64    `json:"gpus"`
	GPUMemoryMB   int64      `json:"gpuMemoryMb"`
	Worker        string     `json:"worker"`
	GPUIndices    []int      `json:"gpuIndices"`
	CreatedAt     time.Time  `json:"createdAt"`
	StartedAt     *time.Time `json:"startedAt"`
	FinishedAt    *time.Time `json:"finishedAt"`
	PendingCode   string     `json:"pendingCode"`
	PendingReason string     `json:"pendingReason"`
}

func replayOnce(e *env, pods []sim.Pod, rounded bool, compress float64, window time.Duration) (*replayResult, error) {
	name := "replay-fractions"
	if rounded {
		name = "replay-rounded"
	}
	rr, err := replayRun(e, name, pods, rounded, compress, replayDense, window, window)
	if err != nil {
		return nil, err
	}
	r := summariseReplay(pods, rr.tasks, rr.t0, rr.end, rr.stop, compress)
	r.overFleet, r.late = rr.stats.Overcommits, rr.late
	if rr.stats.LastOvercommit != "" {
		r.overWhy = strings.TrimPrefix(r.overWhy+"; workers: "+rr.stats.LastOvercommit, "; ")
	}
	e.logf("%s: allocation %.1f%%, held %.1f%%, %d started, mean wait %.0f s, p95 %.0f s, %d never fit, %d waiting, over-commits %d/%d",
		name, 100*r.alloc, 100*r.held, r.started, r.meanWait, r.p95Wait, len(r.neverFit), r.waiting, r.overStore, r.overFleet)
	return r, nil
}

// replayed is what one replay through a real master left: every run as the
// store has it, the real start of the submissions, the end of their window
// and when the replay stopped, the simulated workers' counts, and how late
// the latest submission was.
type replayed struct {
	tasks         []replayTask
	t0, end, stop time.Time
	stats         *groupStats
	late          time.Duration
}

// replayRun starts a master and replayCluster's simulated workers, submits
// each pod at its creation time (relative to the first) divided by
// compress × dense, and waits until every run has started or waits with
// no_worker, or grace after the last submission. masterEnv is more of the
// master's environment.
func replayRun(e *env, name string, pods []sim.Pod, rounded bool, compress, dense float64, window, grace time.Duration, masterEnv ...string) (*replayed, error) {
	dataDir, err := e.dir(name, true)
	if err != nil {
		return nil, err
	}
	m, err := e.startMaster(masterConf{name: name, dataDir: dataDir, env: masterEnv})
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.stop() }()
	tok, err := m.login()
	if err != nil {
		return nil, err
	}
	var fleets []*fleetGroup
	defer func() {
		for _, g := range fleets {
			g.stop()
		}
	}()
	for _, k := range replayCluster {
		g, err := e.startFleet(m.rpc, benchJoinToken, fleetOpts{N: k.count, Prefix: k.prefix, Slots: k.slots, GPUs: k.gpus,
			GPUName: k.model, GPUMemoryMB: k.gpuMemoryMB, CPUMillis: k.cores * 1000, MemoryMB: k.memoryMB, Labels: k.labels, RunForArgv: true})
		if err != nil {
			return nil, err
		}
		fleets = append(fleets, g)
		if n, err := g.connect("", 30*time.Second); err != nil || n != int64(k.count) {
			return nil, fmt.Errorf("%s workers: %d of %d joined (%v)", k.prefix, n, k.count, err)
		}
	}
	if err := waitIdleWorkers(m.url, workersOf(replayCluster), 30*time.Second); err != nil {
		return nil, err
	}

	// Submit each pod at its time; the wait is the store's (createdAt), so
	// a submission late by a few milliseconds costs nothing.
	t0 := time.Now()
	first := pods[0].Created
	var late time.Duration
	for _, p := range pods {
		at := t0.Add(time.Duration(float64(p.Created.Sub(first)) / (compress * dense)))
		time.Sleep(time.Until(at))
		late = max(late, time.Since(at))
		if err := replaySubmit(m, tok, p, rounded, compress); err != nil {
			return nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
	}
	end := t0.Add(window)
	var tasks []replayTask
	for {
		if tasks, err = replayTasks(m); err != nil {
			return nil, err
		}
		settled := true
		for _, t := range tasks {
			if t.StartedAt == nil && t.Status == "QUEUED" && t.PendingCode != "no_worker" {
				settled = false
			}
		}
		if settled || time.Since(end) > grace {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop := time.Now()
	st, err := statsOf(fleets)
	if err != nil {
		return nil, err
	}
	return &replayed{tasks: tasks, t0: t0, end: end, stop: stop, stats: st, late: late}, nil
}

// replaySubmit submits p as a run of "sleep D" (the simulated worker runs it
// for D seconds), D its trace duration compressed.
func replaySubmit(m *rlMaster, tok string, p sim.Pod, rounded bool, compress float64) error {
	gpus := p.GPUs()
	if p.Shares() {
		gpus = math.Ceil(p.GPUs()*100) / 100 // rlsched's shares are hundredths; the trace's are all tens of milli-GPUs
		if rounded {
			gpus = 1
		}
	}
	body := map[string]any{"name": p.Name, "command": []string{"sleep", strconv.FormatFloat(p.Duration().Seconds()/compress, 'f', 3, 64)},
		"gpus": gpus, "cpus": math.Max(float64(p.CPUMilli)/1000, 0.01), "memoryMb": max(p.MemoryMiB, core.MinMemoryMB), "maxRetries": 0}
	if gpus > 0 && len(p.GPUSpec) > 0 {
		body["gpuType"] = p.GPUSpec
	}
	_, err := m.postAs(tok, "/api/train", body, http.StatusAccepted, http.StatusCreated)
	return err
}

// replayTasks reads every run of the master (GET /api/tasks, every page).
func replayTasks(m *rlMaster) ([]replayTask, error) {
	var all []replayTask
	cursor := ""
	for {
		var page struct {
			Items      []replayTask `json:"items"`
			NextCursor string       `json:"nextCursor"`
		}
		if err := m.get("/api/tasks?limit=500&cursor="+url.QueryEscape(cursor), &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" || len(page.Items) == 0 {
			return all, nil
		}
		cursor = page.NextCursor
	}
}

func statsOf(gs []*fleetGroup) (*groupStats, error) {
	out := &groupStats{}
	for _, g := range gs {
		s, err := g.stats()
		if err != nil {
			return nil, err
		}
		mergeStats(out, &s.Stats)
	}
	return out, nil
}

// summariseReplay measures one replay from the runs the store holds at its
// end (stop): allocation over [t0, end], waits, and over-commits.
func summariseReplay(pods []sim.Pod, tasks []replayTask, t0, end, stop time.Time, compress float64) *replayResult {
	r := &replayResult{}
	asked := map[string]float64{}
	for _, p := range pods {
		asked[p.Name] = p.GPUs()
	}
	gpuMem := map[string]int64{} // worker id prefix → GPU memory
	capacity := 0.0
	for _, k := range replayCluster {
		gpuMem[k.prefix] = k.gpuMemoryMB
		capacity += float64(k.count * k.gpus)
	}
	overlap := func(a, b time.Time) float64 { // seconds of [a, b) inside [t0, end)
		a, b = maxTime(a, t0), minTime(b, end)
		return math.Max(0, b.Sub(a).Seconds())
	}
	var waits []float64
	type edge struct {
		id       string
		at       time.Time
		start    bool
		share    int // hundredths; 0: whole
		memoryMB int64
	}
	byGPU := map[string][]edge{}
	for _, t := range tasks {
		if t.StartedAt == nil {
			if t.Status == "QUEUED" && t.PendingCode == "no_worker" {
				r.neverFit = append(r.neverFit, t.PendingReason)
				continue
			}
			r.waiting++
			waits = append(waits, stop.Sub(t.CreatedAt).Seconds()*compress)
			continue
		}
		r.started++
		waits = append(waits, t.StartedAt.Sub(t.CreatedAt).Seconds()*compress)
		fin := stop
		if t.FinishedAt != nil {
			fin = *t.FinishedAt
		}
		d := overlap(*t.StartedAt, fin)
		r.alloc += asked[t.Name] * d
		r.held += t.GPUs * d
		share, mem := 0, int64(0)
		if t.GPUs > 0 && t.GPUs < 1 {
			share = int(math.Round(t.GPUs * 100))
			mem = (&core.Task{GPUFraction: t.GPUs, GPUMemoryMB: t.GPUMemoryMB}).GPUShareMB(gpuMem[kindOf(t.Worker)])
		}
		for _, g := range t.GPUIndices {
			k := t.Worker + "/" + strconv.Itoa(g)
			// startedAt is the worker's clock in milliseconds, finishedAt the
			// master's in nanoseconds: a run started in the millisecond its
			// GPU's last run ended would look started before that end.
			byGPU[k] = append(byGPU[k], edge{t.ID, t.StartedAt.Truncate(time.Millisecond), true, share, mem},
				edge{t.ID, fin.Truncate(time.Millisecond), false, share, mem})
		}
	}
	w := end.Sub(t0).Seconds() * capacity
	r.alloc /= w
	r.held /= w
	slices.Sort(waits)
	if len(waits) > 0 {
		sum := 0.0
		for _, x := range waits {
			sum += x
		}
		r.meanWait = sum / float64(len(waits))
		r.p95Wait = waits[min(len(waits)-1, int(0.95*float64(len(waits))))]
	}
	// Each GPU's runs in time order, an end before a start in the same
	// millisecond.
	for k, es := range byGPU {
		slices.SortStableFunc(es, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			if a.start == b.start {
				return 0
			}
			if a.start {
				return 1
			}
			return -1
		})
		runs, whole, used, mem := 0, 0, 0, int64(0)
		on := map[string]time.Time{}
		for _, e := range es {
			if e.start {
				on[e.id] = e.at
			} else {
				delete(on, e.id)
			}
			sign := 1
			if !e.start {
				sign = -1
			}
			runs += sign
			used += sign * e.share
			mem += int64(sign) * e.memoryMB
			if e.share == 0 {
				whole += sign
			}
			if e.start && ((whole > 0 && runs > 1) || used > 100 || mem > gpuMem[kindOf(strings.Split(k, "/")[0])]) {
				r.overStore++
				r.overWhy = fmt.Sprintf("GPU %s at %s: %d runs, %d whole, shares %.2f, %d MiB (started: %v)", k, e.at.Format(time.RFC3339Nano), runs, whole, float64(used)/100, mem, on)
			}
		}
	}
	return r
}

// kindOf is the replayKind prefix of a simulated worker's id (prefix-000001).
func kindOf(worker string) string {
	if i := strings.LastIndexByte(worker, '-'); i > 0 {
		return worker[:i]
	}
	return worker
}

// countReasons writes reasons as "2 × why; 1 × other", most frequent first.
func countReasons(reasons []string) string {
	n := map[string]int{}
	for _, r := range reasons {
		n[r]++
	}
	keys := slices.Collect(maps.Keys(n))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(n[b]-n[a], strings.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d × %s", n[k], k)
	}
	return strings.Join(parts, "; ")
}

func countShares(ps []sim.Pod) int {
	n := 0
	for _, p := range ps {
		if p.Shares() {
			n++
		}
	}
	return n
}

func workersOf(ks []replayKind) int {
	n := 0
	for _, k := range ks {
		n += k.count
	}
	return n
}

func describeCluster(ks []replayKind) string {
	var parts []string
	for _, k := range ks {
		what := fmt.Sprintf("%d × %d %s (%d MiB)", k.count, k.gpus, k.model, k.gpuMemoryMB)
		if k.gpus == 0 {
			what = fmt.Sprintf("%d × CPU only", k.count)
		}
		parts = append(parts, fmt.Sprintf("%s, %d cores, %d GiB", what, k.cores, k.memoryMB>>10))
	}
	return strings.Join(parts, "; ")
}

func pct(f float64) string  { return fmt.Sprintf("%.1f%%", 100*f) }
func secs(s float64) string { return fmt.Sprintf("%s s", human(s)) }
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
