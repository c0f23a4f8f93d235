package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// maxRetries of every soak run: enough that only a run hit again and again
// runs out of attempts (reported apart, not as a violation).
const maxRetries = 10

// TestChaosSoak is issue 11's soak: two masters, four workers, a stream of
// runs and the nemesis for RLSCHED_CHAOS_DURATION, then the checker.
func TestChaosSoak(t *testing.T) {
	needProcesses(t)
	dur, seed := soakDuration(t), soakSeed(t)
	t.Logf("chaos soak: %v of runs and faults, seed %d (%s=%d replays the same choices)", dur, seed, seedEnv, seed)
	began := time.Now()
	w := startWorld(t, defaultWorld)
	t.Logf("deployment up in %v", time.Since(began).Round(time.Millisecond))

	s := &soak{w: w}
	skip := map[string]bool{}
	if skipKnown() {
		for k, why := range knownKinds {
			skip[k] = true
			t.Logf("%s=skip: no %s faults (%s)", knownEnv, k, why)
		}
	}
	nem := &nemesis{w: w, end: time.Now().Add(dur), outage: min(20*time.Second, max(3*time.Second, dur/8)), skip: skip, logf: t.Logf}

	stopSubmit, stopPoll := make(chan struct{}), make(chan struct{})
	var onceSubmit, oncePoll sync.Once
	endSubmit := func() { onceSubmit.Do(func() { close(stopSubmit) }) }
	endPoll := func() { oncePoll.Do(func() { close(stopPoll) }) }
	var bg sync.WaitGroup
	bg.Go(func() { s.submitLoop(stopSubmit, rand.New(rand.NewSource(seed))) })
	bg.Go(func() { s.pollLoop(stopPoll) })
	defer func() { endSubmit(); endPoll(); bg.Wait() }() // before the world's cleanup, also when the test fails early

	nem.run(seed)
	endSubmit()
	nemesisDone := time.Now()
	t.Logf("nemesis done after %v: %v", nemesisDone.Sub(began).Round(time.Millisecond), nem.counts())
	if len(nem.errs) > 0 {
		t.Errorf("the nemesis could not heal: %v", nem.errs)
	}

	acked := s.acked()
	final, pending := s.drain(acked, 2*time.Minute+dur/10)
	t.Logf("drain: %d acked runs, %d not ended, %v after the nemesis", len(acked), len(pending),
		time.Since(nemesisDone).Round(time.Millisecond))
	if len(pending) > 0 {
		s.diagnoseStuck(t)
	}
	w.waitExecutionsGone(final, 30*time.Second)
	endPoll()
	bg.Wait()

	logs, logErrs := s.fetchLogs(acked, final)
	execs, flaws := w.hist.executions(w.workerOfPid)
	res := check(checkInput{acked: acked, final: final, execs: execs, logs: logs, logErrs: logErrs,
		reads: s.readsCopy(), gpus: w.cfg.gpus, slots: w.cfg.slots, now: time.Now().UnixNano(),
		problems: w.processProblems(), floods: w.floods(), histFlaws: flaws})

	rep := newReport(seed, dur, began, w.cfg, s.submissions(), nem, res, skip)
	rep.FailedStart, rep.Diagnosis = w.failedStarts(), s.diag
	rep.write(t)
	w.reportDir = rep.dir
	reportViolations(t, res)
}

// soak is the submitter and the status poller of a soak.
type soak struct {
	w     *world
	diag  string // what the masters said about runs that did not end
	mu    sync.Mutex
	subs  []submission
	reads []statusRead
}

// submitLoop submits a run every 0.5–2 s until stop. A run asks for 0, 1
// or 2 GPUs and lasts 1–16 s: about five runs at once, on five of the
// eight GPUs.
func (s *soak) submitLoop(stop <-chan struct{}, rng *rand.Rand) {
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		case <-time.After(between(rng, 500*time.Millisecond, 2*time.Second)): // the users' pace
		}
		s.submit(seq, []int{0, 1, 1, 2}[rng.Intn(4)])
	}
}

// submit posts one run through the next master; when that one refuses the
// connection (it is down), through the other.
func (s *soak) submit(seq, gpus int) {
	body := map[string]any{"name": fmt.Sprintf("chaos-%d", seq), "command": s.w.script, "gpus": gpus, "maxRetries": maxRetries}
	for range len(s.w.masters) {
		m := s.w.master()
		sub := submission{Seq: seq, Via: m.name, GPUs: gpus, Sent: time.Now()}
		r, err := s.w.api.do("POST", m.url, "/api/train", body)
		sub.Answered, sub.Status = time.Now(), r.Status
		down := err != nil && errors.Is(err, syscall.ECONNREFUSED) // nothing was sent
		switch {
		case down:
			sub.Outcome, sub.Err = "refused", err.Error()
		case err != nil:
			sub.Outcome, sub.Err = "indeterminate", err.Error()
		case r.Status == 202:
			var ans struct {
				ID      string `json:"id"`
				TraceID string `json:"traceId"`
			}
			if json.Unmarshal(r.Body, &ans) != nil || ans.ID == "" {
				sub.Outcome, sub.Err = "indeterminate", "202 without an id: "+r.String()
			} else {
				sub.Outcome, sub.ID, sub.TraceID = "acked", ans.ID, ans.TraceID
			}
		default:
			sub.Outcome, sub.Err = "refused", r.String()
		}
		s.mu.Lock()
		s.subs = append(s.subs, sub)
		s.mu.Unlock()
		if !down {
			return // answered, or maybe stored: never submit it twice
		}
	}
}

// pollLoop reads the newest runs through the masters in turn about every
// second, for the monotonic-read check.
func (s *soak) pollLoop(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Second): // the poller's pace
		}
		m := s.w.master()
		call := time.Now().UnixNano()
		r, err := s.w.api.do("GET", m.url, "/api/tasks?limit=100", nil)
		ret := time.Now().UnixNano()
		if err != nil || r.Status != 200 {
			continue // a master down or its store: nothing was read
		}
		var page struct {
			Items []taskView `json:"items"`
		}
		if json.Unmarshal(r.Body, &page) != nil {
			continue
		}
		s.mu.Lock()
		for _, tk := range page.Items {
			s.reads = append(s.reads, statusRead{run: tk.ID, status: tk.Status, attempt: tk.Attempt, call: call, ret: ret, via: m.name})
		}
		s.mu.Unlock()
	}
}

func (s *soak) submissions() []submission {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]submission(nil), s.subs...)
}

func (s *soak) acked() []submission {
	var out []submission
	for _, sub := range s.submissions() {
		if sub.Outcome == "acked" {
			out = append(out, sub)
		}
	}
	return out
}

func (s *soak) readsCopy() []statusRead {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]statusRead(nil), s.reads...)
}

// drain waits until every acknowledged run is terminal, or timeout; it
// returns the last listing and the runs not ended.
func (s *soak) drain(acked []submission, timeout time.Duration) (map[string]taskView, []string) {
	var final map[string]taskView
	var pending []string
	if testutil.Poll(timeout, time.Second, func() bool {
		all, err := s.w.api.listAll(s.w.master().url)
		if err != nil {
			return false
		}
		final = map[string]taskView{}
		for _, tk := range all {
			final[tk.ID] = tk
		}
		pending = pending[:0]
		for _, sub := range acked {
			if !terminal[final[sub.ID].Status] {
				pending = append(pending, sub.ID)
			}
		}
		return len(pending) == 0
	}) {
		return final, nil
	}
	return final, pending
}

// diagnoseStuck logs, for runs that did not end, what each master says
// about its workers (GPU by GPU, with the run it thinks holds it) and why
// the first queued runs wait, and saves both answers raw for the report.
func (s *soak) diagnoseStuck(t *testing.T) {
	t.Helper()
	var raw strings.Builder
	for _, m := range s.w.masters {
		for _, path := range []string{"/api/workers", "/api/tasks?status=QUEUED&limit=20"} {
			r, err := s.w.api.do("GET", m.url, path, nil)
			fmt.Fprintf(&raw, "== %s GET %s: %v\n%s\n", m.name, path, err, r.Body)
			if err != nil || r.Status != 200 {
				t.Logf("stuck runs: %s GET %s: %v %v", m.name, path, r, err)
				continue
			}
			var ans struct {
				Items []struct {
					ID, State, Master, Status, PendingReason string
					GPUs                                     []struct {
						Index  int    `json:"index"`
						TaskID string `json:"taskId"`
					} `json:"gpus"`
					RunningTasks []string `json:"runningTasks"`
				} `json:"items"`
			}
			_ = json.Unmarshal(r.Body, &ans)
			for _, it := range ans.Items {
				if strings.HasPrefix(path, "/api/workers") {
					t.Logf("stuck runs: %s sees worker %s %s on %s, GPUs %+v, running %v", m.name, it.ID, it.State, it.Master, it.GPUs, it.RunningTasks)
				} else {
					t.Logf("stuck runs: %s: %s waits: %s", m.name, it.ID, it.PendingReason)
				}
			}
		}
	}
	s.diag = raw.String()
}

// waitExecutionsGone waits until no execution of an ended run is alive (a
// killed worker's guard, or a thawed worker, kills them).
func (w *world) waitExecutionsGone(final map[string]taskView, timeout time.Duration) {
	testutil.Poll(timeout, 100*time.Millisecond, func() bool {
		for run := range w.hist.live() {
			if terminal[final[run].Status] {
				return false
			}
		}
		return true
	})
}

// fetchLogs reads the log of every SUCCEEDED acknowledged run over REST,
// through the masters in turn (another one when one fails).
func (s *soak) fetchLogs(acked []submission, final map[string]taskView) (map[string][]byte, map[string]string) {
	logs, errs := map[string][]byte{}, map[string]string{}
	for _, sub := range acked {
		if final[sub.ID].Status != "SUCCEEDED" {
			continue
		}
		var lastErr error
		for range 2 * len(s.w.masters) {
			b, err := s.w.api.logText(s.w.master().url, sub.ID)
			if err == nil {
				logs[sub.ID] = b
				lastErr = nil
				break
			}
			lastErr = err
		}
		if lastErr != nil {
			errs[sub.ID] = lastErr.Error()
		}
	}
	return logs, errs
}

// reportViolations fails the test with the violations, grouped by kind
// (ten details per kind; the report file has them all).
func reportViolations(t *testing.T, res *checkResult) {
	t.Helper()
	if len(res.Violations) == 0 {
		return
	}
	byKind := map[string][]violation{}
	for _, v := range res.Violations {
		byKind[v.Kind] = append(byKind[v.Kind], v)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		vs := byKind[k]
		msg := fmt.Sprintf("%d violation(s) %s:", len(vs), k)
		for i, v := range vs {
			if i == 10 {
				msg += fmt.Sprintf("\n  … and %d more (see the report)", len(vs)-10)
				break
			}
			msg += "\n  " + v.Detail
		}
		t.Error(msg)
	}
}
