package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/rlsched/rlsched/core"
)

// procRun is one rlsched configuration of dispatch-proc.
type procRun struct {
	name      string
	rates     []float64
	cpuPerRun []time.Duration
	// workerCPU is the workers' CPU a run, with that of the runs they reaped.
	workerCPU []time.Duration
	failed    int
}

// runDispatchProc runs real `rlsched worker` processes (each starting runs
// from its one spawner thread, in their own process groups, with output
// pipes) executing /bin/true, against the machine's own fork/exec rate
// measured in the same run with as many concurrent starters as the workers
// have slots.
func runDispatchProc(e *env) (*report, error) {
	workers, slots := 2, 4
	n := pick(e, 300, 2000)
	repeats := pick(e, 1, 3)
	places := pick(e, []bool{false}, []bool{false, true})
	rep := &report{size: fmt.Sprintf("%d worker processes × %d slots; %s runs of /bin/true a repeat, median of %d", workers, slots, human(float64(n)), repeats)}

	d := pick(e, time.Second, 3*time.Second)
	forkAll, forkCPU, err := forkExecCPU(workers*slots, d)
	if err != nil {
		return nil, err
	}
	forkOne, err := forkExecRate(1, d)
	if err != nil {
		return nil, err
	}
	e.logf("fork/exec /bin/true: %.0f/s with %d goroutines, %.0f/s with one", forkAll, workers*slots, forkOne)
	var runs []*procRun
	for _, tmpfs := range places {
		r, err := e.procRun(tmpfs, workers, slots, n, repeats)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	t := rep.newTable("Runs of /bin/true through real workers", "configuration", "runs/s (median)",
		"ratio to fork/exec", "master CPU per run", "workers' CPU per run (with the runs')", "failed runs")
	for _, r := range runs {
		t.add(r.name, human(median(r.rates)), ratioStr(median(r.rates), forkAll), ms(medianDur(r.cpuPerRun)),
			ms(medianDur(r.workerCPU)), fmt.Sprint(r.failed))
	}
	t.add(fmt.Sprintf("reference: fork/exec/wait of /bin/true, %d goroutines (exec.Cmd.Run)", workers*slots), human(forkAll), "1.00", "",
		ms(forkCPU)+" (the harness's and the child's)", "")
	t.add("reference: the same from one goroutine", human(forkOne), ratioStr(forkOne, forkAll), "", "", "")
	rate := median(runs[0].rates)
	rep.goal(rate >= 0.8*forkAll, "≥ 80%% of the fork/exec rate, data on disk: %s runs/s = %.0f%% of %s/s",
		human(rate), 100*rate/forkAll, human(forkAll))
	rep.note("The rate is runs / (last finishedAt − first startedAt) from the store; startedAt comes from the worker's TaskStarted, finishedAt is the master's commit of TaskFinished.")
	rep.note("What bounds it: master, workers and runs share this machine's %d cores. One fork/exec/wait of /bin/true costs %s of CPU in the reference, which is how it reaches %s/s; through rlsched a run costs %s in the master and %s in its worker (with the run itself), %s in all, so the cores allow about %s runs/s, of which %s are reached.",
		runtime.NumCPU(), ms(forkCPU), human(forkAll), ms(medianDur(runs[0].cpuPerRun)), ms(medianDur(runs[0].workerCPU)),
		ms(medianDur(runs[0].cpuPerRun)+medianDur(runs[0].workerCPU)),
		human(float64(runtime.NumCPU())/(medianDur(runs[0].cpuPerRun)+medianDur(runs[0].workerCPU)).Seconds()), human(rate))
	rep.result = result{metric: "runs_per_s", value: rate, unit: "runs/s", ref: "fork_exec_rate", refValue: forkAll}
	return rep, nil
}

func (e *env) procRun(onTmpfs bool, workers, slots, n, repeats int, workerEnv ...string) (*procRun, error) {
	dataDir, err := e.dir("proc", onTmpfs)
	if err != nil {
		return nil, err
	}
	m, err := e.startMaster(masterConf{name: "proc", dataDir: dataDir})
	if err != nil {
		return nil, err
	}
	defer m.stop()
	var pids []int
	var procs []*os.Process
	for i := 0; i < workers; i++ {
		cmd, stop, err := e.startWorker(m, filepath.Join(dataDir, "worker-"+strconv.Itoa(i)), fmt.Sprintf("bench-proc-%d", i), slots, workerEnv...)
		if err != nil {
			return nil, err
		}
		defer stop()
		pids = append(pids, cmd.Process.Pid)
		procs = append(procs, cmd.Process)
	}
	if err := waitIdleWorkers(m.url, workers, 30*time.Second); err != nil {
		return nil, err
	}
	r := &procRun{name: "rlsched master + " + strconv.Itoa(workers) + " `rlsched worker`, data on " + placeName(onTmpfs)}
	db := filepath.Join(dataDir, "rlsched.db")
	done := 0
	label := "proc-" + map[bool]string{false: "disk", true: "tmpfs"}[onTmpfs]
	for i := 0; i < repeats; i++ {
		m.profile(fmt.Sprintf("%s-%d", label, i), true)
		if e.profDir != "" {
			for _, p := range procs {
				e.profileProc(p, i+1, "", true)
			}
		}
		s0, w0 := sample(m.pid()), treeCPU(pids)
		mark := time.Now()
		if err := preloadQueue(db, n, []string{"/bin/true"}); err != nil {
			return nil, err
		}
		done += n
		deadline := time.Now().Add(time.Duration(max(120, n/10)) * time.Second)
		for {
			c, err := countStatus(db)
			if err != nil {
				return nil, err
			}
			ended := c[core.StatusSucceeded] + c[core.StatusFailed] + c[core.StatusCancelled] + c[core.StatusTimeout]
			if ended >= done {
				r.failed = c[core.StatusFailed]
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("only %d of %d runs ended (%v)", ended, done, c)
			}
			time.Sleep(50 * time.Millisecond)
		}
		s1, w1 := sample(m.pid()), treeCPU(pids)
		m.profile(fmt.Sprintf("%s-%d", label, i), false)
		if e.profDir != "" {
			for k, p := range procs {
				e.profileProc(p, i+1, fmt.Sprintf("%s-%d-worker-%d", label, i, k), false)
			}
		}
		first, last, cnt, err := runTimesSince(db, mark)
		if err != nil {
			return nil, err
		}
		rate := float64(cnt) / last.Sub(first).Seconds()
		r.rates = append(r.rates, rate)
		r.cpuPerRun = append(r.cpuPerRun, s0.cpuTo(s1)/time.Duration(n))
		r.workerCPU = append(r.workerCPU, (w1-w0)/time.Duration(n))
		e.logf("%s: %d runs in %v: %.0f runs/s, master CPU %v", r.name, cnt, last.Sub(first).Round(time.Millisecond), rate, s0.cpuTo(s1))
	}
	return r, nil
}

// startWorker starts an `rlsched worker` of m with no GPUs in dir, with
// env added to its environment; stop interrupts it and waits for its end.
func (e *env) startWorker(m *rlMaster, dir, id string, slots int, env ...string) (*exec.Cmd, func(), error) {
	bin, err := e.rlschedBin()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "worker", "--master", m.rpc, "--id", id, "--slots", strconv.Itoa(slots), "--gpus", "0", "--data-dir", dir)
	// RUN_AS=none: the worker's data dir is inside the master's (mode
	// 0700), and the scenarios measure dispatch, not uid handling.
	cmd.Env = append(append(os.Environ(), "WORKER_JOIN_TOKEN="+benchJoinToken, "LOG_FORMAT=json", "RUN_AS=none"), env...)
	if e.profDir != "" { // the workers are profiled beside the master
		cmd.Env = append(cmd.Env, "RLSCHED_BENCH_PROFILE_DIR="+e.profDir)
	}
	logf, err := os.Create(filepath.Join(e.tmp, fmt.Sprintf("%s-%d.log", id, time.Now().UnixNano())))
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = e.start(cmd)
	logf.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot start rlsched worker: %w", err)
	}
	return cmd, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}, nil
}

// runTimesSince is runTimes over SUCCEEDED runs started after mark.
// treeCPU is the CPU time of the processes pids and of the children they
// reaped.
func treeCPU(pids []int) time.Duration {
	var t time.Duration
	for _, pid := range pids {
		c, _ := procTreeCPU(pid)
		t += c
	}
	return t
}

func runTimesSince(db string, mark time.Time) (first, last time.Time, n int, err error) {
	return runTimes(db, core.StatusSucceeded, mark)
}

func waitIdleWorkers(url string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/api/monitor/health")
		if err == nil {
			var h struct {
				Workers map[string]int `json:"workers"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Workers["IDLE"] >= n {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%d workers did not join within %v", n, timeout)
}
