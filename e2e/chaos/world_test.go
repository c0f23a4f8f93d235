package chaos

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// worldConfig sizes a deployment.
type worldConfig struct {
	masters, workers int
	gpus, slots      int // per worker
	hbTTL, taskTTL   int // seconds: WORKER_HB_TTL_SECONDS (workers beat every third), WORKER_TASK_TTL_SECONDS
}

// defaultWorld is issue 11's deployment, with leases short enough that
// faults matter within seconds.
var defaultWorld = worldConfig{masters: 2, workers: 4, gpus: 2, slots: 2, hbTTL: 3, taskTTL: 4}

// world is one deployment: private MariaDB and Redis, masters, workers
// behind links, the history of the runs, and a REST client.
type world struct {
	t     *testing.T
	cfg   worldConfig
	c     *rig.Cluster // the binary, the secrets, the servers' environment
	dir   string       // process output and data dirs (c.Dir)
	share string       // 01777: the history and its socket, reachable by every uid

	redis   *testsvc.Redis
	mdb     *testsvc.MariaDB
	masters []*masterProc
	workers []*workerProc
	hist    *history
	api     *api
	script  []string // the argv of every run

	reportDir string // where the report went; a failed test's files go there too

	mu   sync.Mutex
	next int // round robin over masters
}

// masterProc is a master; it keeps its ports across restarts so that the
// links (and the REST client) find it again.
type masterProc struct {
	*proc
	url, rpc string
}

// workerProc is a worker and its links, one per master, in the order of
// its --master list.
type workerProc struct {
	*proc
	id    string
	links []*link
}

// startWorld starts everything and returns once every worker joined a
// master and the admin user exists.
func startWorld(t *testing.T, cfg worldConfig) *world {
	t.Helper()
	c := rig.New(t)
	w := &world{t: t, cfg: cfg, c: c, dir: c.Dir, api: newAPI()}
	share, err := os.MkdirTemp("", "rlsched-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(share) })
	if err := os.Chmod(share, 0o1777); err != nil {
		t.Fatal(err)
	}
	w.share = share
	w.hist = newHistory(t, share)
	w.script = []string{"python3", "-c", runScript, w.hist.path, w.hist.sock}

	w.redis = testsvc.StartRedis(t)
	w.mdb = testsvc.StartMariaDB(t)
	t.Cleanup(w.cleanup) // after the services' cleanups were registered: runs before them

	logDir := filepath.Join(w.dir, "logs")
	for i := range cfg.masters {
		name := fmt.Sprintf("master-%c", 'a'+i)
		m := &masterProc{proc: &proc{name: name, bin: c.Bin, dir: w.dir, ready: logged("master started")}}
		m.env = c.MasterEnv("MYSQL_DSN="+w.mdb.DSN(),
			"REDIS_ADDR="+w.redis.Addr(), "REDIS_PREFIX=chaos", "LOG_DIR="+logDir,
			"WORKER_HB_TTL_SECONDS="+strconv.Itoa(cfg.hbTTL), "WORKER_TASK_TTL_SECONDS="+strconv.Itoa(cfg.taskTTL),
			"RLSCHED_CANCEL_GRACE_SECONDS=2")
		m.args = rig.MasterArgs(filepath.Join(w.dir, name), 0, 0, name)
		if err := w.startMaster(m, 90*time.Second); err != nil {
			t.Fatal(err)
		}
		w.masters = append(w.masters, m)
	}
	admin, _ := rig.NewClient(t, w.masters[0].url).Signup("chaos")
	w.api.token = admin.Token
	gpuEnv := hideGPUs(t, w.dir)
	for i := range cfg.workers {
		id := fmt.Sprintf("w%d", i+1)
		wp := &workerProc{proc: &proc{name: "worker-" + id, bin: c.Bin, dir: w.dir, ready: logged("worker starting")}, id: id}
		var addrs []string
		for j := range cfg.masters {
			m := w.masters[(i+j)%cfg.masters] // workers spread over the masters
			l := newLink(t, m.rpc)
			wp.links = append(wp.links, l)
			addrs = append(addrs, l.Addr())
		}
		// CHAOS_WORKER reaches the runs (the worker passes its environment
		// on, less secrets), so the history names the worker.
		wp.env = c.ServerEnv(append([]string{"WORKER_JOIN_TOKEN=" + c.JoinToken, "CHAOS_WORKER=" + id}, gpuEnv...)...)
		wp.args = rig.WorkerArgs(strings.Join(addrs, ","), id, cfg.slots, cfg.gpus, filepath.Join(w.dir, "worker-"+id))
		if err := wp.start(); err != nil {
			t.Fatal(err)
		}
		w.workers = append(w.workers, wp)
	}
	for _, wp := range w.workers {
		if err := w.waitJoined(wp, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// hideGPUs returns the environment that makes workers offer the --gpus
// synthetic GPUs on a machine with real ones: a PATH whose first nvidia-smi
// fails (the worker then falls back to --gpus), so the soak's deployment
// is the same everywhere. Without nvidia-smi it returns nothing.
func hideGPUs(t *testing.T, dir string) []string {
	t.Helper()
	if _, err := exec.LookPath("nvidia-smi"); err != nil {
		return nil
	}
	bin := filepath.Join(dir, "fake-bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'the chaos soak hides the real GPUs' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
}

// logged returns a proc.ready that looks for a log message.
func logged(msg string) func(string) bool {
	return func(path string) bool {
		for _, l := range rig.ParseLog(path) {
			if l.Msg() == msg {
				return true
			}
		}
		return false
	}
}

// startMaster starts m and waits until it logs "master started"; the first
// start picks free ports, later ones reuse them. A start that fails (the
// store is down, say) is retried a second later until timeout, as a
// supervisor would.
func (w *world) startMaster(m *masterProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	var started logLine
	up := testutil.Poll(timeout, time.Second, func() bool {
		if !m.running() {
			if err = m.start(); err != nil {
				return true
			}
		}
		testutil.Poll(time.Until(deadline), 50*time.Millisecond, func() bool {
			for _, l := range m.logs() {
				if l.Msg() == "master started" {
					started = l
					return true
				}
			}
			return !m.running()
		})
		return started != nil
	})
	if err != nil {
		return err
	}
	if !up {
		_ = m.kill()
		return fmt.Errorf("%s did not start within %v; its output:\n%s", m.name, timeout, rig.TailFile(m.outPath, 20))
	}
	if m.url == "" {
		m.url, m.rpc = started.Str("url"), started.Str("rpc")
		_, rpcPort, _ := net.SplitHostPort(m.rpc)
		_, httpPort, _ := net.SplitHostPort(strings.TrimPrefix(m.url, "http://"))
		m.args = replaceArg(replaceArg(m.args, "--rpc-port", rpcPort), "--master-port", httpPort)
	}
	return nil
}

func replaceArg(args []string, flag, value string) []string {
	out := append([]string(nil), args...)
	for i := range out {
		if out[i] == flag && i+1 < len(out) {
			out[i+1] = value
		}
	}
	return out
}

// startWorker starts wp again; a worker that exits at once (its data dir
// still locked by the old one's guard, say) is retried a second later
// until timeout.
func (w *world) startWorker(wp *workerProc, timeout time.Duration) error {
	var err error
	up := testutil.Poll(timeout, time.Second, func() bool {
		if err = wp.start(); err != nil {
			return true
		}
		// Not a wait for an event: a worker still running 3 s after its
		// start has settled (there is no line that says so sooner).
		exited := testutil.Poll(3*time.Second, 50*time.Millisecond, func() bool { return !wp.running() })
		return !exited
	})
	if err != nil {
		return err
	}
	if !up {
		return fmt.Errorf("%s keeps exiting; its output:\n%s", wp.name, rig.TailFile(wp.outPath, 20))
	}
	return nil
}

// waitJoined waits until some master logged that the worker's current
// incarnation joined.
func (w *world) waitJoined(wp *workerProc, timeout time.Duration) error {
	var exited bool
	joined := testutil.Poll(timeout, 100*time.Millisecond, func() bool {
		for _, m := range w.masters {
			for _, l := range m.logs() {
				if l.Msg() == "worker joined" && l.Str("worker") == wp.id {
					return true
				}
			}
		}
		exited = !wp.running()
		return exited
	})
	switch {
	case exited:
		return fmt.Errorf("%s exited before it joined; its output:\n%s", wp.name, rig.TailFile(wp.outPath, 20))
	case !joined:
		return fmt.Errorf("%s did not join a master within %v; its output:\n%s", wp.name, timeout, rig.TailFile(wp.outPath, 20))
	}
	return nil
}

// master returns the next master in turn (REST requests spread over them).
func (w *world) master() *masterProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	return w.masters[w.next%len(w.masters)]
}

// workerOfPid names the worker one of whose incarnations had pid.
func (w *world) workerOfPid(pid int) string {
	for _, wp := range w.workers {
		wp.mu.Lock()
		for _, p := range wp.pids {
			if p == pid {
				wp.mu.Unlock()
				return wp.id
			}
		}
		wp.mu.Unlock()
	}
	return ""
}

// processProblems lists crashes and exits nobody asked for.
func (w *world) processProblems() []string {
	var out []string
	for _, p := range w.procs() {
		out = append(append(out, p.crashes()...), p.selfExits()...)
	}
	return out
}

// floods lists the processes that spun (see proc.floods).
func (w *world) floods() []string {
	var out []string
	for _, p := range w.procs() {
		out = append(out, p.floods()...)
	}
	return out
}

// failedStarts counts the incarnations that exited before they were up
// (a master cannot start while MariaDB is down; the test retries).
func (w *world) failedStarts() int {
	n := 0
	for _, p := range w.procs() {
		p.mu.Lock()
		n += p.failedStarts
		p.mu.Unlock()
	}
	return n
}

func (w *world) procs() []*proc {
	var ps []*proc
	for _, m := range w.masters {
		ps = append(ps, m.proc)
	}
	for _, wp := range w.workers {
		ps = append(ps, wp.proc)
	}
	return ps
}

// keepArtifacts copies what a failed soak leaves (the history, the run
// logs, every process's output) into dir/artifacts, for the post-mortem.
func (w *world) keepArtifacts(dir string) {
	dst := filepath.Join(dir, "artifacts")
	if err := os.CopyFS(dst, os.DirFS(w.dir)); err != nil {
		w.t.Logf("cannot keep the soak's files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dst, "history.txt"), mustRead(w.hist.path), 0o644); err != nil {
		w.t.Logf("cannot keep the history: %v", err)
	}
	w.t.Logf("the soak's files are in %s", dst)
}

func mustRead(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// cleanup kills every process of the deployment, then what is left of the
// runs (by the pids their socket hellos gave), and keeps the files of a
// failed test beside its report.
func (w *world) cleanup() {
	defer func() {
		if w.t.Failed() && w.reportDir != "" {
			w.keepArtifacts(w.reportDir)
		}
	}()
	for _, wp := range w.workers {
		wp.destroy()
	}
	for _, m := range w.masters {
		m.destroy()
	}
	// The guards kill the runs of a dead worker, given a moment.
	testutil.Poll(10*time.Second, 100*time.Millisecond, func() bool { return len(w.hist.live()) == 0 })
	for _, rs := range w.hist.live() {
		for _, r := range rs {
			if p, _, ok := strings.Cut(r.nonce, "."); ok {
				if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
					w.t.Logf("killing leftover run process %d (run %s attempt %d)", pid, r.run, r.attempt)
					killPid(pid)
				}
			}
		}
	}
}

// liveRecords are the executions alive now, each with its worker resolved.
func (w *world) liveRecords() []sockRecord {
	var out []sockRecord
	for _, rs := range w.hist.live() {
		for _, r := range rs {
			if r.worker == "" {
				r.worker = w.workerOfPid(r.ppid)
			}
			out = append(out, r)
		}
	}
	return out
}

// liveByWorker counts the executions alive now per worker.
func (w *world) liveByWorker() map[string]int {
	out := map[string]int{}
	for _, r := range w.liveRecords() {
		out[r.worker]++
	}
	return out
}
