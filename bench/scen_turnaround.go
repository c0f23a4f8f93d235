package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// turnaroundRunSeconds is how long each run of the turnaround scenario
// sleeps: the GPU time it really needs.
const turnaroundRunSeconds = 0.1

// runTurnaround measures how busy `rlsched up` keeps its GPUs between runs
// (issue 33): n runs of `sleep 0.1`, each wanting 1 of 4 fake GPUs, queued
// at once through REST into `rlsched up` with its defaults (as root: each
// run under a uid of its own, its outputs synced at its end). The physical
// limit is 4 / 0.1 s = 40 runs/s; what rlsched loses per run is split from
// each run's history (docs/API.md "History") into where it goes.
func runTurnaround(e *env) (*report, error) {
	const gpus = 4
	n := pick(e, 40, 100)
	repeats := pick(e, 1, 3)
	limit := gpus / turnaroundRunSeconds
	rep := &report{size: fmt.Sprintf("%d runs of `sleep %g` a repeat, 1 of %d fake GPUs each, median of %d", n, turnaroundRunSeconds, gpus, repeats)}
	var rates, busy []float64
	var last []handoff
	for i := 0; i < repeats; i++ {
		r, b, hs, err := e.turnaroundOnce(n, gpus)
		if err != nil {
			return nil, err
		}
		e.logf("turnaround: %.1f runs/s, GPUs busy %.1f%%", r, 100*b)
		rates, busy, last = append(rates, r), append(busy, b), hs
	}
	rate := median(rates)
	t := rep.newTable("Runs of `sleep 0.1` through `rlsched up`", "configuration", "runs/s (median)", "ratio to the GPUs' limit", "GPUs busy")
	t.add(fmt.Sprintf("`rlsched up --gpus %d`, its defaults%s", gpus, map[bool]string{true: " as root (a uid a run)", false: " (not root: runs share the uid)"}[os.Geteuid() == 0]),
		human(rate), ratioStr(rate, limit), fmt.Sprintf("%.1f%%", 100*median(busy)))
	t.add(fmt.Sprintf("reference: %d GPUs × 1 / %g s, nothing between runs", gpus, turnaroundRunSeconds), human(limit), "1.00", "100%")
	idleOf := func(h handoff) time.Duration { return h.idle }
	startOf := func(h handoff) time.Duration { return h.start }
	if len(last) > 0 {
		bt := rep.newTable("Where a run's turnaround goes (the last repeat, from the runs' histories)", "stage", "mean", "p95")
		for _, st := range []struct {
			name  string
			first bool // the first run on its GPU has one too
			of    func(handoff) time.Duration
		}{
			{"idle: the GPU's last run's process ended (its RUNNING + 0.1 s) → the next RUNNING on it", false, idleOf},
			{"placement: the GPU's last run's end committed → the next DISPATCHED (below 0: placed on its TaskExited, before its end)", false, func(h handoff) time.Duration { return h.place }},
			{"start: DISPATCHED → RUNNING (ExecuteTask, uid and dirs, fork/exec, TaskStarted)", true, startOf},
			{"end: RUNNING + 0.1 s → the end committed (exit, output sync, TaskFinished commit)", true, func(h handoff) time.Duration { return h.end }},
		} {
			if mean, p95, ok := stageStats(last, st.first, st.of); ok {
				bt.add(st.name, signedMs(mean), signedMs(p95))
			}
		}
		rep.note("A GPU is free for placement once its run's process is gone (TaskExited, issue 33), before the run's outputs are stored and its end committed; idle is what the GPU loses per run, from the process's end to the next run's start on it (placement, then the next start); the end goes on beside the next run.")
	}
	// The runs that follow another on their GPU, for idle and its start
	// alike, so that the one is part of the other.
	idle, _, idleOK := stageStats(last, false, idleOf)
	start, _, _ := stageStats(last, false, startOf)
	if idleOK && median(busy) < 0.97 {
		// A GPU runs 0.1 s and then waits idle for its next run, so the
		// idle a run bounds the busy fraction whatever else is tuned.
		runD := time.Duration(turnaroundRunSeconds * float64(time.Second))
		allows := func(d time.Duration) float64 { return 100 * float64(runD) / float64(runD+max(d, 0)) }
		rep.note("The bound, from the stages above (the last repeat): a GPU idles %s a run (mean) against the run's %s, which allows at most %.1f%% busy (measured %.1f%%, over a span that also ends with the last run's end commit); of that idle, the next run's start (DISPATCHED → RUNNING, over the runs that follow another on their GPU) takes %s, which alone allows %.1f%%, and the way from the process's end to the next DISPATCHED (TaskExited to the master, the placement) %s. 97%% allows %s of idle a run.",
			ms(idle), ms(runD), allows(idle), 100*median(busy), ms(start), allows(start), signedMs(idle-start), ms(time.Duration(float64(runD)*(1/0.97-1))))
	}
	rep.goal(median(busy) >= 0.97, "GPUs busy ≥ 97%% from the first start to the last end: %.1f%% (%s runs/s of the limit's %s)",
		100*median(busy), human(rate), human(limit))
	rep.result = result{metric: "runs_per_s", value: rate, unit: "runs/s", ref: "gpu_limit", refValue: limit}
	return rep, nil
}

// stageStats is the mean and p95 of a stage over hs; withFirst counts the
// first run on each GPU too (it has no stage before it on its GPU).
func stageStats(hs []handoff, withFirst bool, of func(handoff) time.Duration) (mean, p95 time.Duration, ok bool) {
	var ds []time.Duration
	for _, h := range hs {
		if withFirst || !h.first {
			ds = append(ds, of(h))
		}
	}
	if len(ds) == 0 {
		return 0, 0, false
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds)), ds[len(ds)*95/100], true
}

// signedMs is ms for a span that may be below 0 (a placement before the
// end it follows).
func signedMs(d time.Duration) string {
	if d < 0 {
		return "−" + ms(-d)
	}
	return ms(d)
}

// handoff is one run's stages on its GPU (runTurnaround); idle and place
// are the gap after the GPU's run before, none for the first run on it.
type handoff struct {
	first                   bool
	idle, place, start, end time.Duration
}

// turnaroundOnce starts a fresh `rlsched up`, queues n runs, waits for
// them, and returns runs/s, the GPUs' busy fraction and each run's stages.
func (e *env) turnaroundOnce(n, gpus int) (float64, float64, []handoff, error) {
	bin, err := e.rlschedBin()
	if err != nil {
		return 0, 0, nil, err
	}
	dir, err := e.dir("turnaround", false)
	if err != nil {
		return 0, 0, nil, err
	}
	// Runs under their own uids must reach the worker's outputs: the
	// directories above the data dir need o+x, as `rlsched up` says.
	for _, d := range []string{e.tmp, dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return 0, 0, nil, err
		}
	}
	var ports [3]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return 0, 0, nil, err
		}
	}
	cmd := exec.Command(bin, "up", "--data-dir", dir, "--gpus", strconv.Itoa(gpus),
		"--master-port", strconv.Itoa(ports[0]), "--rpc-port", strconv.Itoa(ports[1]), "--gateway-port", strconv.Itoa(ports[2]))
	// RLSCHED_CONFIG_DIR: up records its URL for the CLI there, not in the
	// user's own config.
	cmd.Env = append(os.Environ(), "LOG_FORMAT=json", "MAX_QUEUED_PER_USER=0", "RLSCHED_CONFIG_DIR="+filepath.Join(dir, "cli-config"))
	logf, err := os.Create(filepath.Join(e.tmp, fmt.Sprintf("up-%d.log", time.Now().UnixNano())))
	if err != nil {
		return 0, 0, nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = e.start(cmd)
	logf.Close()
	if err != nil {
		return 0, 0, nil, fmt.Errorf("cannot start rlsched up: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	m := &rlMaster{e: e, url: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	if err := waitIdleWorkers(m.url, 1, 60*time.Second); err != nil {
		return 0, 0, nil, fmt.Errorf("rlsched up: %w (log %s)", err, logf.Name())
	}
	tok, err := m.login()
	if err != nil {
		return 0, 0, nil, err
	}
	body := []byte(fmt.Sprintf(`{"name":"turnaround","command":["sleep","%g"],"gpus":1}`, turnaroundRunSeconds))
	for i := 0; i < n; i++ {
		req, _ := http.NewRequest(http.MethodPost, m.url+"/api/train", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return 0, 0, nil, fmt.Errorf("POST /api/train: HTTP %d %s", resp.StatusCode, bytes.TrimSpace(b))
		}
	}
	db := filepath.Join(dir, "master", "rlsched.db")
	deadline := time.Now().Add(time.Duration(60+n) * time.Second)
	for {
		c, err := countStatus(db)
		if err != nil {
			return 0, 0, nil, err
		}
		ended := c[core.StatusSucceeded] + c[core.StatusFailed] + c[core.StatusCancelled] + c[core.StatusTimeout]
		if ended >= n {
			if c[core.StatusSucceeded] != n {
				return 0, 0, nil, fmt.Errorf("runs ended %v, want %d SUCCEEDED (log %s)", c, n, logf.Name())
			}
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, nil, fmt.Errorf("only %d of %d runs ended (%v)", ended, n, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return turnaroundStages(db, n, gpus)
}

// turnaroundStages reads the runs' histories: the span from the first
// start to the last end, and per run its stages on its GPU.
func turnaroundStages(db string, n, gpus int) (float64, float64, []handoff, error) {
	st, err := sqlite.Open(db)
	if err != nil {
		return 0, 0, nil, err
	}
	defer st.Close()
	var ts []core.Task
	f := store.Filter{Limit: 500}
	for {
		page, next, err := st.ListTasks(context.Background(), f)
		if err != nil {
			return 0, 0, nil, err
		}
		ts = append(ts, page...)
		if next == "" {
			break
		}
		f.Cursor = next
	}
	type span struct {
		gpu                      string
		dispatched, running, end time.Time
	}
	var spans []span
	var first, last time.Time
	for _, t := range ts {
		s := span{gpu: fmt.Sprint(t.Worker, t.GPUIndices)}
		for _, h := range t.HistoryView() {
			switch h.Status {
			case string(core.StatusDispatched):
				s.dispatched = h.At
			case string(core.StatusRunning):
				s.running = h.At
			case string(core.StatusSucceeded):
				s.end = h.At
			}
		}
		if s.dispatched.IsZero() || s.running.IsZero() || s.end.IsZero() {
			return 0, 0, nil, fmt.Errorf("run %s: history lacks a stage: %+v", t.ID, t.HistoryView())
		}
		if first.IsZero() || s.running.Before(first) {
			first = s.running
		}
		if s.end.After(last) {
			last = s.end
		}
		spans = append(spans, s)
	}
	slices.SortFunc(spans, func(a, b span) int { return a.dispatched.Compare(b.dispatched) })
	prev := map[string]span{}
	hs := make([]handoff, 0, len(spans))
	runD := time.Duration(turnaroundRunSeconds * float64(time.Second))
	for _, s := range spans {
		h := handoff{first: true, start: s.running.Sub(s.dispatched), end: s.end.Sub(s.running) - runD}
		if p, ok := prev[s.gpu]; ok {
			h.first = false
			h.place = s.dispatched.Sub(p.end)
			h.idle = s.running.Sub(p.running.Add(runD))
		}
		prev[s.gpu] = s
		hs = append(hs, h)
	}
	makespan := last.Sub(first).Seconds()
	rate := float64(len(spans)) / makespan
	busy := float64(len(spans)) * turnaroundRunSeconds / (float64(gpus) * makespan)
	return rate, busy, hs, nil
}
