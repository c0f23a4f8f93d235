package chaos

// The checker: pure functions over what the soak recorded. Each property is
// checked by hand-written code rather than a linearizability checker such
// as Porcupine, because each reduces to something simpler and exact:
//
//   - "no two executions of a run at once" and "no GPU held twice" are
//     mutual exclusion over intervals: a sweep over start-sorted intervals;
//   - "what the masters answer never goes backwards" is linearizability of
//     a read-only monotonic register, which holds exactly when no read that
//     began after another one returned saw an earlier state: a pairwise
//     real-time check (sorting by return time makes it O(n log n)).
//
// Porcupine would search for a linearization that these checks compute
// directly, and report less precisely which pair broke the rule.

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// submission is one POST /api/train of the soak.
type submission struct {
	Seq      int       `json:"seq"`
	Via      string    `json:"via"`
	Sent     time.Time `json:"sent"`
	Answered time.Time `json:"answered"`
	Status   int       `json:"status,omitempty"`
	ID       string    `json:"id,omitempty"`
	TraceID  string    `json:"traceId,omitempty"`
	GPUs     int       `json:"gpus"`
	// Outcome: acked (202 with an id), refused (an answer other than 202,
	// or a connection refused: not stored), or indeterminate (no answer to
	// a request that may have arrived).
	Outcome string `json:"outcome"`
	Err     string `json:"err,omitempty"`
}

// statusRead is one run's status as one list request through one master
// answered it; call and ret bound when the master read it (Unix ns).
type statusRead struct {
	run, status string
	attempt     int
	call, ret   int64
	via         string
}

// violation is one broken promise, with what is needed to find it again.
type violation struct {
	Kind   string `json:"kind"`
	Run    string `json:"run,omitempty"`
	Detail string `json:"detail"`
	// For overlaps: how long the two were (at most) alive at once, to
	// their observed exits, and how long at least (to their last lines).
	OverlapMs float64 `json:"overlapMs,omitempty"`
	ProvedMs  float64 `json:"provedMs,omitempty"`
}

// Kinds of violations.
const (
	vNotEnded     = "run-not-ended"        // an acked run is not terminal when the soak gave up waiting
	vMissing      = "run-missing"          // an acked run is not in the store
	vBadEnd       = "run-ended-badly"      // terminal, but neither SUCCEEDED nor FAILED with its retries exhausted
	vUnexecuted   = "succeeded-unexecuted" // SUCCEEDED, yet no execution of its last attempt ran to the end
	vOverlap      = "attempts-overlap"     // two executions of one run alive at once
	vDuplicate    = "attempt-twice"        // one attempt executed by two processes
	vOrphan       = "orphan-execution"     // a process of a run still alive after the run ended
	vGPUShared    = "gpu-shared"           // one (worker, GPU) given to two executions at once
	vGPUInvalid   = "gpu-invalid"          // a GPU index the worker does not have, or the wrong number of GPUs
	vSlots        = "slots-exceeded"       // more CPU runs at once on a worker than its slots
	vLog          = "log-wrong"            // a SUCCEEDED run's log is not byte-exact
	vStaleRead    = "stale-read"           // a master answered an older state after a newer one was answered
	vProcess      = "process-crash"        // a master or worker panicked, logged BUG:, or exited by itself
	vHistory      = "history-corrupt"      // the history could not be read
	vTerminalFlip = "terminal-changed"     // a terminal status was later read as another one
	vFlood        = "log-flood"            // a process logged one message hundreds of times a second: it spins
)

// checkInput is everything the soak recorded.
type checkInput struct {
	acked     []submission
	final     map[string]taskView // by id, as listed after the soak
	execs     []*execution
	logs      map[string][]byte // of SUCCEEDED acked runs
	logErrs   map[string]string // runs whose log could not be fetched
	reads     []statusRead
	gpus      int   // per worker
	slots     int   // CPU slots per worker
	now       int64 // when the history was read: the end of executions still alive
	problems  []string
	floods    []string
	histFlaws []string
}

// checkResult is the verdict and the figures of the report.
type checkResult struct {
	Violations []violation    `json:"violations"`
	ByKind     map[string]int `json:"violationsByKind"`
	Succeeded  int            `json:"succeeded"`
	Exhausted  []string       `json:"retriesExhausted"` // FAILED, lost more times than maxRetries allowed
	Attempts   map[int]int    `json:"attemptsHistogram"`
	Executions int            `json:"executions"`
	Killed     int            `json:"executionsKilled"` // did not reach their end line
	NoWorker   int            `json:"executionsWithoutWorker"`
	Reads      int            `json:"statusReads"`
	// MinGapMs is the shortest time between one execution of a run dying
	// and the next one starting, over the runs whose executions did not
	// overlap (-1: no run ran twice): how close the soak came to an overlap.
	MinGapMs    float64 `json:"minGapMs"`
	LogsChecked int     `json:"logsChecked"`
}

func (r *checkResult) add(v violation) {
	r.Violations = append(r.Violations, v)
	r.ByKind[v.Kind]++
}

// check runs every checker.
func check(in checkInput) *checkResult {
	r := &checkResult{ByKind: map[string]int{}, Attempts: map[int]int{}, MinGapMs: -1}
	for _, p := range in.problems {
		r.add(violation{Kind: vProcess, Detail: p})
	}
	for _, p := range in.floods {
		r.add(violation{Kind: vFlood, Detail: p})
	}
	for _, p := range in.histFlaws {
		r.add(violation{Kind: vHistory, Detail: p})
	}
	gpusOf := map[string]int{}
	for _, s := range in.acked {
		gpusOf[s.ID] = s.GPUs
	}
	checkEnds(in, r)
	checkOverlaps(in, r)
	checkResources(in, gpusOf, r)
	checkLogs(in, r)
	checkReads(in.reads, r)
	return r
}

var lostAfter = regexp.MustCompile(`^lost after (\d+) attempt\(s\)`)

// checkEnds: every acknowledged run is in the store and terminal; it
// SUCCEEDED (exit 0, after an execution of its last attempt that ran to the
// end), or it FAILED because it was lost more often than maxRetries allows
// (the nemesis' doing: allowed, but listed). Anything else is a violation.
func checkEnds(in checkInput, r *checkResult) {
	completed := map[string]bool{} // run/attempt with an execution that wrote "end"
	for _, e := range in.execs {
		if e.ended {
			completed[e.run+"/"+strconv.Itoa(e.attempt)] = true
		}
	}
	for _, s := range in.acked {
		tk, ok := in.final[s.ID]
		switch {
		case !ok:
			r.add(violation{Kind: vMissing, Run: s.ID, Detail: fmt.Sprintf("submission %d was acknowledged by %s at %s but the run is not listed",
				s.Seq, s.Via, s.Answered.UTC().Format(time.StampMilli))})
			continue
		case !terminal[tk.Status]:
			r.add(violation{Kind: vNotEnded, Run: s.ID, Detail: "still " + tk.String()})
			continue
		}
		r.Attempts[tk.Attempt]++
		switch {
		case tk.Status == "SUCCEEDED":
			r.Succeeded++
			if tk.ExitCode == nil || *tk.ExitCode != 0 {
				r.add(violation{Kind: vBadEnd, Run: s.ID, Detail: "SUCCEEDED without exit code 0: " + tk.String()})
			}
			if !completed[s.ID+"/"+strconv.Itoa(tk.Attempt)] {
				r.add(violation{Kind: vUnexecuted, Run: s.ID, Detail: "no execution of its last attempt ran to its end line: " + tk.String()})
			}
		case tk.Status == "FAILED" && exhausted(tk):
			r.Exhausted = append(r.Exhausted, tk.String())
		default:
			r.add(violation{Kind: vBadEnd, Run: s.ID, Detail: tk.String()})
		}
	}
}

// exhausted reports whether a FAILED run was lost once more than its
// retries allow.
func exhausted(tk taskView) bool {
	m := lostAfter.FindStringSubmatch(tk.Error)
	if m == nil {
		return false
	}
	n, _ := strconv.Atoi(m[1])
	return n == tk.MaxRetries+1 && tk.Attempt == n
}

// endOf is the latest time e may have been alive; an execution still alive
// lasts until now.
func endOf(e *execution, now int64) int64 {
	if e.alive {
		return now
	}
	return e.end()
}

// checkOverlaps: no two executions of one run were alive at once (margin
// 0: one machine, one clock), each attempt ran in one process, and nothing
// of an ended run is still alive.
func checkOverlaps(in checkInput, r *checkResult) {
	r.Executions = len(in.execs)
	byRun := map[string][]*execution{}
	for _, e := range in.execs {
		byRun[e.run] = append(byRun[e.run], e)
		if !e.ended {
			r.Killed++
		}
	}
	for run, es := range byRun { // start-sorted, as executions returns them
		for i := range es {
			if es[i].alive && terminal[in.final[run].Status] {
				r.add(violation{Kind: vOrphan, Run: run, Detail: fmt.Sprintf("%v is alive after the run ended %s", es[i], in.final[run].Status)})
			}
			for j := i + 1; j < len(es); j++ {
				a, b := es[i], es[j]
				if a.attempt == b.attempt {
					r.add(violation{Kind: vDuplicate, Run: run, Detail: fmt.Sprintf("attempt %d executed by two processes: %v and %v", a.attempt, a, b)})
				}
				ov := min(endOf(a, in.now), endOf(b, in.now)) - max(a.start, b.start)
				if ov <= 0 {
					if j == i+1 && (r.MinGapMs < 0 || ms(-ov) < r.MinGapMs) {
						r.MinGapMs = ms(-ov)
					}
					continue
				}
				proved := max(min(a.last, b.last)-max(a.start, b.start), 0)
				r.add(violation{Kind: vOverlap, Run: run, OverlapMs: ms(ov), ProvedMs: ms(proved),
					Detail: fmt.Sprintf("%v and %v were alive at once for up to %.0f ms (at least %.0f ms by their own lines)",
						a, b, ms(ov), ms(proved))})
			}
		}
	}
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// checkResources: every GPU an execution saw is one its worker has, as
// many as the run asked for, and never one another execution held at the
// same time; CPU runs on a worker never outnumber its slots.
func checkResources(in checkInput, gpusOf map[string]int, r *checkResult) {
	type span struct {
		e          *execution
		start, end int64
	}
	held := map[string][]span{} // "worker/gpu" → spans
	cpu := map[string][]span{}  // worker → CPU runs' spans
	for _, e := range in.execs {
		want, known := gpusOf[e.run]
		var idx []int
		if e.cuda != "" {
			for _, f := range strings.Split(e.cuda, ",") {
				g, err := strconv.Atoi(f)
				if err != nil || g < 0 || g >= in.gpus {
					r.add(violation{Kind: vGPUInvalid, Run: e.run, Detail: fmt.Sprintf("%v got CUDA_VISIBLE_DEVICES=%q; its worker has GPUs 0-%d", e, e.cuda, in.gpus-1)})
					continue
				}
				idx = append(idx, g)
			}
		}
		if known && len(idx) != want {
			r.add(violation{Kind: vGPUInvalid, Run: e.run, Detail: fmt.Sprintf("%v got %d GPU(s) (%q); it asked for %d", e, len(idx), e.cuda, want)})
		}
		if e.worker == "" {
			r.NoWorker++
			continue
		}
		s := span{e: e, start: e.start, end: endOf(e, in.now)}
		for _, g := range idx {
			k := e.worker + "/" + strconv.Itoa(g)
			held[k] = append(held[k], s)
		}
		if len(idx) == 0 && known && want == 0 {
			cpu[e.worker] = append(cpu[e.worker], s)
		}
	}
	for k, spans := range held {
		sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
		for i := range spans {
			for j := i + 1; j < len(spans) && spans[j].start < spans[i].end; j++ {
				a, b := spans[i], spans[j]
				ov := min(a.end, b.end) - b.start
				r.add(violation{Kind: vGPUShared, Run: b.e.run, OverlapMs: ms(ov),
					Detail: fmt.Sprintf("GPU %s held by %v and %v at once for up to %.0f ms", k, a.e, b.e, ms(ov))})
			}
		}
	}
	for wk, spans := range cpu {
		// A sweep over start and end events counts the CPU runs alive.
		type ev struct {
			t     int64
			delta int
			e     *execution
		}
		var evs []ev
		for _, s := range spans {
			evs = append(evs, ev{s.start, 1, s.e}, ev{s.end, -1, s.e})
		}
		sort.Slice(evs, func(i, j int) bool {
			if evs[i].t != evs[j].t {
				return evs[i].t < evs[j].t
			}
			return evs[i].delta < evs[j].delta // an end at t frees the slot for a start at t
		})
		n := 0
		for _, e := range evs {
			n += e.delta
			if n > in.slots {
				r.add(violation{Kind: vSlots, Run: e.e.run, Detail: fmt.Sprintf("%d CPU runs at once on %s (slots %d) when %v started", n, wk, in.slots, e.e)})
			}
		}
	}
}

// markerLine is the line logpipe writes before the output of attempt ≥ 2.
var markerLine = regexp.MustCompile(`^=== rlsched attempt (\d+) ===\n$`)

// checkLogs: each SUCCEEDED run's log is byte-exact.
func checkLogs(in checkInput, r *checkResult) {
	for _, s := range in.acked {
		tk, ok := in.final[s.ID]
		if !ok || tk.Status != "SUCCEEDED" {
			continue
		}
		if e, bad := in.logErrs[s.ID]; bad {
			r.add(violation{Kind: vLog, Run: s.ID, Detail: "cannot fetch its log: " + e})
			continue
		}
		r.LogsChecked++
		if err := verifyLog(in.logs[s.ID], s.TraceID, tk.Attempt, expectedOutput(s.ID)); err != nil {
			r.add(violation{Kind: vLog, Run: s.ID, Detail: err.Error()})
		}
	}
}

// verifyLog checks a SUCCEEDED run's log file (logpipe's format): the line
// TRACE_ID:<traceId>, then attempt 1's output, then for each later attempt
// that printed anything a marker line and its output. An attempt cut short
// left a prefix of its output (logpipe ends it with a newline before the
// next marker when it ended mid-line); the last attempt, which succeeded,
// left all of it, and nothing comes after.
func verifyLog(log []byte, traceID string, final int, want []byte) error {
	header := []byte("TRACE_ID:" + traceID + "\n")
	if !bytes.HasPrefix(log, header) {
		return fmt.Errorf("log does not start with %q: %q", header, head(log))
	}
	type segment struct {
		attempt int
		at      int // byte offset in the log
		b       []byte
	}
	segs := []segment{{attempt: 1, at: len(header)}}
	for pos := len(header); pos < len(log); {
		end := bytes.IndexByte(log[pos:], '\n')
		if end < 0 {
			end = len(log)
		} else {
			end += pos + 1
		}
		line := log[pos:end]
		if m := markerLine.FindSubmatch(line); m != nil {
			n, _ := strconv.Atoi(string(m[1]))
			if last := segs[len(segs)-1].attempt; n <= last {
				return fmt.Errorf("marker of attempt %d at byte %d follows attempt %d", n, pos, last)
			}
			segs = append(segs, segment{attempt: n, at: end})
		} else {
			segs[len(segs)-1].b = append(segs[len(segs)-1].b, line...)
		}
		pos = end
	}
	last := segs[len(segs)-1]
	if last.attempt != final {
		return fmt.Errorf("log ends with the output of attempt %d; the run succeeded in attempt %d", last.attempt, final)
	}
	if !bytes.Equal(last.b, want) {
		d := firstDiff(last.b, want)
		return fmt.Errorf("output of attempt %d: %d bytes, want %d; first difference at byte %d of the log: %q, want %q",
			final, len(last.b), len(want), last.at+d, head(last.b[min(d, len(last.b)):]), head(want[min(d, len(want)):]))
	}
	for _, s := range segs[:len(segs)-1] {
		p := s.b
		if !bytes.HasPrefix(want, p) {
			// A partial last line gets a newline before the next marker.
			if q := bytes.TrimSuffix(p, []byte("\n")); len(q) == len(p) || len(q) == 0 || q[len(q)-1] == '\n' || !bytes.HasPrefix(want, q) {
				d := firstDiff(p, want)
				return fmt.Errorf("output of attempt %d at byte %d is not a prefix of the run's output; first difference at byte %d: %q",
					s.attempt, s.at, s.at+d, head(p[min(d, len(p)):]))
			}
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func head(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}

// statusRank orders a run's states: attempt by attempt, QUEUED before
// DISPATCHED before RUNNING before LOST, and every terminal state last.
func statusRank(status string, attempt int) (int64, bool) {
	if terminal[status] {
		return 1 << 40, true
	}
	phase, ok := map[string]int64{"QUEUED": 1, "DISPATCHED": 2, "RUNNING": 3, "LOST": 4}[status]
	return int64(attempt)*8 + phase, ok
}

// checkReads: per run, no read that began after another read returned saw
// an earlier state, whichever masters answered them; and a terminal status,
// once read, is the only one ever read.
func checkReads(reads []statusRead, r *checkResult) {
	r.Reads = len(reads)
	byRun := map[string][]statusRead{}
	for _, rd := range reads {
		byRun[rd.run] = append(byRun[rd.run], rd)
	}
	for run, rs := range byRun {
		byCall := append([]statusRead(nil), rs...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
		byRet := append([]statusRead(nil), rs...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		var best *statusRead // highest rank among reads returned before the current call
		var bestRank int64
		termSeen := ""
		j := 0
		reported := 0
		for i := range byCall {
			rd := byCall[i]
			for j < len(byRet) && byRet[j].ret < rd.call {
				if k, ok := statusRank(byRet[j].status, byRet[j].attempt); ok && (best == nil || k > bestRank) {
					best, bestRank = &byRet[j], k
				}
				j++
			}
			k, ok := statusRank(rd.status, rd.attempt)
			if !ok {
				continue // a status this checker does not know: not ordered
			}
			if terminal[rd.status] {
				if termSeen != "" && termSeen != rd.status {
					r.add(violation{Kind: vTerminalFlip, Run: run, Detail: fmt.Sprintf("read %s through %s after %s", rd.status, rd.via, termSeen)})
				}
				termSeen = rd.status
			}
			if best != nil && k < bestRank && reported < 3 {
				reported++
				r.add(violation{Kind: vStaleRead, Run: run, Detail: fmt.Sprintf("%s answered %s (attempt %d) at %s, after %s had answered %s (attempt %d) at %s",
					rd.via, rd.status, rd.attempt, stamp(rd.call), best.via, best.status, best.attempt, stamp(best.ret))})
			}
		}
	}
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }
