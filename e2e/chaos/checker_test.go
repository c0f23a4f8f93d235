package chaos

// The checker's own tests: a checker that cannot fail proves nothing, so
// each property is shown to catch what it is for, on made-up histories.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

const sec = int64(time.Second)

func ok(id string) taskView {
	zero := 0
	return taskView{ID: id, Status: "SUCCEEDED", Attempt: 1, MaxRetries: maxRetries, ExitCode: &zero}
}

// goodLog is the log of a run that succeeded in attempt after earlier
// attempts that printed nothing.
func goodLog(id string, attempt int) []byte {
	b := []byte("TRACE_ID:tr\n")
	if attempt > 1 {
		b = append(b, fmt.Sprintf("=== rlsched attempt %d ===\n", attempt)...)
	}
	return append(b, expectedOutput(id)...)
}

func exec1(run string, attempt int, nonce, worker, cuda string, start, last, exit int64, ended bool) *execution {
	return &execution{run: run, attempt: attempt, nonce: nonce, worker: worker, cuda: cuda, start: start, last: last, exit: exit, ended: ended}
}

func kinds(r *checkResult) string {
	var ks []string
	for _, v := range r.Violations {
		ks = append(ks, v.Kind)
	}
	return strings.Join(ks, ",")
}

func TestCheckOverlap(t *testing.T) {
	f := func(name string, a, b *execution, want string, wantMs float64) {
		t.Helper()
		tk := ok("r1")
		tk.Attempt = 2
		in := checkInput{acked: []submission{{ID: "r1", GPUs: 1, TraceID: "tr"}}, final: map[string]taskView{"r1": tk},
			execs: []*execution{a, b}, gpus: 2, slots: 2, logs: map[string][]byte{"r1": goodLog("r1", 2)}}
		r := check(in)
		if got := kinds(r); got != want {
			t.Errorf("%s: violations %q, want %q: %+v", name, got, want, r.Violations)
		}
		for _, v := range r.Violations {
			if v.Kind == vOverlap && v.OverlapMs != wantMs {
				t.Errorf("%s: overlap %v ms, want %v", name, v.OverlapMs, wantMs)
			}
		}
	}
	// Attempt 1 killed at 10 s (its socket closed), attempt 2 from 11 s.
	f("apart", exec1("r1", 1, "a", "w1", "0", 0, 9*sec, 10*sec, false),
		exec1("r1", 2, "b", "w2", "1", 11*sec, 15*sec, 15*sec, true), "", 0)
	// The frozen worker's run lived 12 s into attempt 2 (issue 11).
	f("frozen", exec1("r1", 1, "a", "w1", "0", 0, 20*sec, 21*sec, false),
		exec1("r1", 2, "b", "w2", "1", 9*sec, 30*sec, 30*sec, true), vOverlap, 12000)
	// Same attempt twice, one after the other: a duplicate, no overlap.
	f("twice", exec1("r1", 2, "a", "w1", "0", 0, 1*sec, 2*sec, false),
		exec1("r1", 2, "b", "w2", "1", 3*sec, 4*sec, 4*sec, true), vDuplicate, 0)
	// Both on w1's GPU 0 at once: an overlap and a shared GPU.
	f("gpu", exec1("r1", 1, "a", "w1", "0", 0, 5*sec, 6*sec, false),
		exec1("r1", 2, "b", "w1", "0", 5*sec, 8*sec, 8*sec, true), vOverlap+","+vGPUShared, 1000)
	// A GPU the worker does not have, and two where one was asked for.
	f("gpu index", exec1("r1", 1, "a", "w1", "2", 0, 1*sec, 2*sec, false),
		exec1("r1", 2, "b", "w1", "0,1", 3*sec, 4*sec, 4*sec, true), vGPUInvalid+","+vGPUInvalid+","+vGPUInvalid, 0)
}

func TestCheckEnds(t *testing.T) {
	f := func(name string, tk taskView, execs []*execution, want string) {
		t.Helper()
		in := checkInput{acked: []submission{{ID: "r1", GPUs: 0, TraceID: "tr"}}, final: map[string]taskView{}, execs: execs,
			gpus: 2, slots: 2, logs: map[string][]byte{"r1": goodLog("r1", 1)}}
		if tk.ID != "" {
			in.final["r1"] = tk
		}
		if got := kinds(check(in)); got != want {
			t.Errorf("%s: violations %q, want %q", name, got, want)
		}
	}
	done := []*execution{exec1("r1", 1, "a", "w1", "", 0, sec, sec, true)}
	f("succeeded", ok("r1"), done, "")
	f("missing", taskView{}, nil, vMissing)
	running := ok("r1")
	running.Status = "RUNNING"
	f("not ended", running, done, vNotEnded)
	f("never ran to the end", ok("r1"), []*execution{exec1("r1", 1, "a", "w1", "", 0, sec, sec, false)}, vUnexecuted)
	failed := ok("r1")
	failed.Status, failed.Attempt, failed.Error = "FAILED", maxRetries+1, "lost after 11 attempt(s): lease expired"
	f("retries exhausted", failed, nil, "")
	failed.Attempt, failed.Error = 4, "lost after 4 attempt(s): the worker reconnected without the run"
	f("lost early", failed, nil, vBadEnd)
	alive := exec1("r1", 1, "a", "w1", "", 0, sec, 0, true)
	alive.alive = true
	f("orphan", ok("r1"), []*execution{alive}, vOrphan)
}

func TestCheckSlots(t *testing.T) {
	var subs []submission
	final := map[string]taskView{}
	var execs []*execution
	logs := map[string][]byte{}
	for i, id := range []string{"r1", "r2", "r3"} {
		subs = append(subs, submission{ID: id, TraceID: "tr"})
		final[id] = ok(id)
		logs[id] = goodLog(id, 1)
		execs = append(execs, exec1(id, 1, id, "w1", "", int64(i)*sec, 10*sec, 10*sec, true))
	}
	r := check(checkInput{acked: subs, final: final, execs: execs, gpus: 2, slots: 2, logs: logs})
	if kinds(r) != vSlots {
		t.Errorf("three CPU runs at once on two slots: %+v", r.Violations)
	}
}

func TestVerifyLog(t *testing.T) {
	want := expectedOutput("r1")
	part := want[:bytes.IndexByte(want[len(want)/2:], '\n')+len(want)/2+1] // whole lines
	cut := part[:len(part)-5]                                              // ends mid-line
	hdr := "TRACE_ID:tr\n"
	f := func(name, log string, final int, wantErr string) {
		t.Helper()
		err := verifyLog([]byte(log), "tr", final, want)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: error %v, want one containing %q", name, err, wantErr)
		}
	}
	f("one attempt", hdr+string(want), 1, "")
	f("retried", hdr+string(part)+"=== rlsched attempt 2 ===\n"+string(want), 2, "")
	f("retried mid-line", hdr+string(cut)+"\n=== rlsched attempt 3 ===\n"+string(want), 3, "")
	f("silent first attempt", hdr+"=== rlsched attempt 2 ===\n"+string(want), 2, "")
	f("no header", string(want), 1, "does not start with")
	f("a byte short", hdr+string(want[:len(want)-1]), 1, "first difference")
	f("a line twice", hdr+string(want)+string(want[:10]), 1, "first difference")
	f("wrong attempt", hdr+string(want), 2, "succeeded in attempt 2")
	f("markers out of order", hdr+"=== rlsched attempt 3 ===\n"+string(part)+"=== rlsched attempt 2 ===\n"+string(want), 2, "follows attempt 3")
	f("garbage before", hdr+"xx\n=== rlsched attempt 2 ===\n"+string(want), 2, "not a prefix")
}

func TestCheckReads(t *testing.T) {
	f := func(name string, reads []statusRead, want string) {
		t.Helper()
		r := &checkResult{ByKind: map[string]int{}}
		checkReads(reads, r)
		if got := kinds(r); got != want {
			t.Errorf("%s: violations %q, want %q: %+v", name, got, want, r.Violations)
		}
	}
	rd := func(st string, attempt int, call, ret int64) statusRead {
		return statusRead{run: "r1", status: st, attempt: attempt, call: call, ret: ret, via: "m"}
	}
	f("forward", []statusRead{rd("QUEUED", 1, 0, 1), rd("RUNNING", 1, 2, 3), rd("QUEUED", 2, 4, 5), rd("SUCCEEDED", 2, 6, 7)}, "")
	// Concurrent reads may see the states in either order.
	f("concurrent", []statusRead{rd("RUNNING", 1, 0, 10), rd("QUEUED", 1, 1, 9)}, "")
	f("backwards", []statusRead{rd("RUNNING", 1, 0, 1), rd("QUEUED", 1, 2, 3)}, vStaleRead)
	f("attempt backwards", []statusRead{rd("QUEUED", 2, 0, 1), rd("RUNNING", 1, 2, 3)}, vStaleRead)
	f("terminal then running", []statusRead{rd("SUCCEEDED", 1, 0, 1), rd("RUNNING", 1, 2, 3)}, vStaleRead)
	f("terminal flips", []statusRead{rd("SUCCEEDED", 1, 0, 1), rd("FAILED", 1, 2, 3)}, vTerminalFlip)
}

func TestMergeHistory(t *testing.T) {
	data := "start r1 1 10.aa w1 5 0 100\nline r1 1 10.aa w1 5 0 200\nstart r1 2 11.bb - 7 - 300\nend r1 2 11.bb - 7 - 400\n"
	socks := map[string]sockRecord{"10.aa": {run: "r1", attempt: 1, nonce: "10.aa", opened: 90, closed: 250},
		"12.cc": {run: "r2", attempt: 1, nonce: "12.cc", opened: 500}}
	es, problems := mergeHistory([]byte(data+"junk\n"), socks, func(ppid int) string {
		if ppid == 7 {
			return "w2"
		}
		return ""
	})
	if len(problems) != 1 {
		t.Errorf("problems %v, want one (the junk line)", problems)
	}
	if len(es) != 3 {
		t.Fatalf("%d executions, want 3: %+v", len(es), es)
	}
	a, b, c := es[0], es[1], es[2]
	if a.nonce != "10.aa" || a.start != 90 || a.last != 200 || a.exit != 250 || a.ended || a.pid != 10 || a.worker != "w1" || a.cuda != "0" {
		t.Errorf("killed execution: %+v", a)
	}
	if b.nonce != "11.bb" || b.start != 300 || b.last != 400 || !b.ended || b.worker != "w2" || b.cuda != "" || b.exit != 0 {
		t.Errorf("execution without a socket: %+v", b)
	}
	if c.nonce != "12.cc" || !c.alive || c.start != 500 {
		t.Errorf("execution known by its socket only: %+v", c)
	}
}

// TestRunScript runs the run program by hand, the way a worker would, and
// checks its output against expectedOutput and its history lines.
func TestRunScript(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed; the runs of the soak need it")
		}
		t.Skip("python3 is not installed")
	}
	dir := t.TempDir()
	h := newHistory(t, dir)
	id := "r-script-65" // prints 19 lines in 1 s
	cmd := exec.Command(py, "-c", runScript, h.path, h.sock)
	cmd.Env = append(os.Environ(), "RLSCHED_TASK_ID="+id, "RLSCHED_ATTEMPT=3", "CHAOS_WORKER=w9", "CUDA_VISIBLE_DEVICES=1")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run script: %v\n%s", err, out)
	}
	if string(out) != string(expectedOutput(id)) {
		t.Errorf("output:\n%s\nwant:\n%s", out, expectedOutput(id))
	}
	var es []*execution
	var problems []string
	// The socket's end reaches the server a moment after the exit.
	testutil.Poll(30*time.Second, 20*time.Millisecond, func() bool {
		es, problems = h.executions(nil)
		return len(es) == 1 && es[0].exit != 0
	})
	if len(problems) > 0 || len(es) != 1 {
		t.Fatalf("history: %v, %+v", problems, es)
	}
	e := es[0]
	if e.run != id || e.attempt != 3 || e.worker != "w9" || e.cuda != "1" || !e.ended || e.nosock || e.exit < e.last || e.start > e.last {
		t.Errorf("execution: %+v", e)
	}
	if fi, err := os.Stat(filepath.Join(dir, "history.txt")); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("history file mode: %v %v; want 0666 so runs under any uid append", fi.Mode(), err)
	}
}

func TestFloods(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range floodLimit + 1 {
		fmt.Fprintf(&b, `{"level":"error","message":"spin","time":"2026-01-01T00:00:00Z","i":%d}`+"\n", i)
		fmt.Fprintf(&b, `{"level":"info","message":"request","time":"2026-01-01T00:00:00Z"}`+"\n")
		fmt.Fprintf(&b, `{"level":"info","message":"calm","time":"2026-01-01T00:00:%02dZ"}`+"\n", i%60)
	}
	if err := os.WriteFile(filepath.Join(dir, "w.1.log"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: "w", dir: dir, gen: 1}
	got := p.floods()
	if len(got) != 1 || !strings.Contains(got[0], `"spin" 201 times`) {
		t.Errorf("floods: %q; want the spinning message only", got)
	}
}

// TestHideGPUs: on a machine with nvidia-smi, the workers' PATH finds a
// failing one first, so they fall back to --gpus.
func TestHideGPUs(t *testing.T) {
	real := t.TempDir()
	if err := os.WriteFile(filepath.Join(real, "nvidia-smi"), []byte("#!/bin/sh\necho '0, H200, 143771 MiB'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", real+string(os.PathListSeparator)+os.Getenv("PATH"))
	env := hideGPUs(t, t.TempDir())
	if len(env) != 1 || !strings.HasPrefix(env[0], "PATH=") {
		t.Fatalf("hideGPUs: %q; want a PATH", env)
	}
	t.Setenv("PATH", strings.TrimPrefix(env[0], "PATH=")) // the workers' PATH
	if out, err := exec.Command("nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader").Output(); err == nil {
		t.Errorf("nvidia-smi on the workers' PATH answered %q; want a failure", out)
	}
}
