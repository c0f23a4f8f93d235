package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/secure"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/isolation"
	"github.com/rlsched/rlsched/worker/outputs"
	"github.com/rlsched/rlsched/worker/spool"
)

const (
	// logChunk is the largest LogData payload and the pump's read size.
	logChunk = 64 << 10
	// drainTimeout: after the run's leader exits and its group is killed,
	// a pipe that stays open this long without a byte is held by a process
	// that left the group (setsid); the worker stops waiting for it.
	drainTimeout = 5 * time.Second
	// cgroupKillTimeout bounds the kill of a run's control group.
	cgroupKillTimeout = 10 * time.Second
)

// execute starts the run m names, read on session s. Called from the
// session's reader goroutine only, so ExecuteTasks are handled one at a time.
func (a *agent) execute(s *session, m *pb.ExecuteTask) {
	log := a.log.With().Str("task", m.GetTaskId()).Int32("attempt", m.GetAttempt()).
		Uint64("fence", m.GetFence()).Str("trace", m.GetTraceId()).Logger()
	r := &run{
		id:       m.GetTaskId(),
		attempt:  m.GetAttempt(),
		fence:    m.GetFence(),
		token:    m.GetRunToken(),
		gpus:     gpuInts(m.GetGpuIndices()),
		fraction: m.GetGpuFraction(),
		gpuMemMB: m.GetGpuMemoryMb(),
		image:    m.GetImage() != "",
		out:      a.newSpool(m),
		log:      log,
		pumped:   make(chan struct{}),
	}

	if !a.tab.admit(s, r) {
		return
	}

	cmd, pipeW, err := a.prepare(m, r)
	if err == nil && (len(m.GetRestore()) > 0 || m.GetCodeTree() != "" || r.py.toBuild() || m.GetImage() != "") {
		// The files of earlier attempts first (outputs.Files.Restore), off
		// the reader goroutine, which brings their chunks; then its Python
		// env, built if need be. The run is held meanwhile: heartbeats
		// renew it, a Hello lists it.
		if !a.tab.holdRestoring(r) {
			a.unprepare(r, pipeW)
			return
		}
		go func() {
			// Its image first (image.go), then the code snapshot
			// (code.go), then the outputs of earlier attempts, then its
			// Python env, which may be built from a requirements file of
			// either.
			var err error
			if m.GetImage() != "" {
				err = a.pullImage(r, m.GetImage())
			}
			if err == nil {
				err = a.materialise(r, m, cmd)
			}
			if err == nil && len(m.GetRestore()) > 0 {
				r.outs.Restore(m.GetRestore())
			}
			var envErr error
			if err == nil && r.py.toBuild() {
				envErr = a.buildEnv(r, cmd)
			}
			forgotten, stopped := a.tab.restored(r)
			switch {
			case forgotten:
				a.unprepare(r, pipeW)
			case stopped != pb.Outcome_OUTCOME_UNSPECIFIED:
				a.unprepare(r, pipeW)
				fin := startFailedMsg(m, errors.New("stopped while its image or code or the files of earlier attempts were fetched, or its Python env built, before it started"))
				fin.Outcome = stopped
				a.tab.unstarted(r, fin, false)
			case err != nil:
				a.unprepare(r, pipeW)
				a.tab.unstarted(r, startFailedMsg(m, err), false)
			default:
				a.launch(r, m, cmd, pipeW, envErr, log)
			}
		}()
		return
	}
	a.launch(r, m, cmd, pipeW, err, log)
}

// unprepare gives back what prepare took, for a run that never starts.
func (a *agent) unprepare(r *run, pipeW *os.File) {
	r.pipe.Close()
	pipeW.Close()
	r.cg.Remove()
	r.releaseCache()
	r.releaseMPS()
	r.releaseEnv()
	a.iso.Release(r.ident, r.dirs, r.log)
	r.out.Close()
	r.outs.End()
}

// launch starts the prepared run (err: prepare's, then the start is a
// failure reported as START_FAILED).
func (a *agent) launch(r *run, m *pb.ExecuteTask, cmd *exec.Cmd, pipeW *os.File, err error, log zerolog.Logger) {
	if err == nil {
		var stopping bool
		stopping, err = a.tab.start(r, cmd, m, func() error {
			g := r.cg
			if r.image {
				g = nil // the runtime is not the run; its container goes into r.cg (image.go)
			}
			err := a.spawner.start(cmd, g)
			pipeW.Close() // the child holds its own copy
			return err
		})
		if stopping {
			a.unprepare(r, pipeW)
			return
		}
		if err == nil {
			if err := a.guard.Add(r.pgid, r.ident.DynamicUID()); err != nil {
				log.Error().Err(err).Msg("guard")
			}
			if r.term != nil {
				a.startTerm(r, m)
			}
			go a.pump(r)
			go a.reap(r)
			a.kick()
			return
		}
		r.pipe.Close()
		r.pipe = nil
	}
	log.Warn().Err(err).Strs("argv", m.GetArgv()).Msg("cannot start run")
	// Its owner reads why in the run's log as well as in its error.
	_, _ = fmt.Fprintf(r.out, "[rlsched] cannot start the run: %v\n", err)
	r.cg.Remove()
	r.releaseCache()
	r.releaseMPS()
	r.releaseEnv()
	a.iso.Release(r.ident, r.dirs, r.log) // nothing runs under its uid
	r.out.Close()
	r.outs.End()
	a.tab.unstarted(r, startFailedMsg(m, err), true)
}

// newSpool makes the output spool of the run m names: in memory up to
// SpoolMemory, then in DataDir/spool/<taskId>.<attempt> up to SpoolDisk.
func (a *agent) newSpool(m *pb.ExecuteTask) *spool.Buffer {
	l := spool.Limits{Memory: a.cfg.SpoolMemory}
	if core.ValidTaskID(m.GetTaskId()) { // an invalid id never starts; never a path
		l.Disk = a.cfg.SpoolDisk
		l.Dir = filepath.Join(a.cfg.DataDir, "spool", fmt.Sprintf("%s.%d", m.GetTaskId(), m.GetAttempt()))
	}
	return spool.NewSpilling(l)
}

// prepare validates m and builds its command, with stdout and stderr on one
// pipe whose read end it stores in r.pipe. It returns the write end, which
// the caller closes after Start. It sets r.ident, r.dirs and r.cg; on an
// error the caller releases them (a.iso.Release, r.cg.Remove).
func (a *agent) prepare(m *pb.ExecuteTask, r *run) (*exec.Cmd, *os.File, error) {
	if !core.ValidTaskID(m.GetTaskId()) {
		return nil, nil, fmt.Errorf("invalid task id %q: want [A-Za-z0-9_-]{1,64}", m.GetTaskId())
	}
	if len(m.GetArgv()) == 0 && !m.GetInteractive() {
		return nil, nil, errors.New("empty argv")
	}
	for _, g := range m.GetGpuIndices() {
		if !slices.ContainsFunc(a.cfg.GPUs, func(x GPU) bool { return x.Index == int(g) }) {
			return nil, nil, fmt.Errorf("GPU %d is not on this worker", g)
		}
	}
	if err := checkShare(r.fraction, r.gpuMemMB, r.gpus); err != nil {
		return nil, nil, err
	}
	if err := a.tab.checkGPUs(r); err != nil {
		return nil, nil, err
	}
	if err := checkTaskEnv(m.GetEnv(), m.GetInteractive()); err != nil {
		return nil, nil, err
	}
	if err := a.checkImage(m); err != nil {
		return nil, nil, err
	}
	if m.GetCpuMillis() < 0 || m.GetMemoryMb() < 0 {
		return nil, nil, fmt.Errorf("invalid resources: cpu_millis %d, memory_mb %d; want 0 (no limit) or more", m.GetCpuMillis(), m.GetMemoryMb())
	}
	wd := m.GetWorkdir()
	if wd != "" && !filepath.IsAbs(wd) {
		return nil, nil, fmt.Errorf("workdir %q must be an absolute path", wd)
	}
	var err error
	if r.ident, err = a.iso.Acquire(m); err != nil {
		return nil, nil, err
	}
	// An interactive run without argv gets its uid's login shell.
	margv := m.GetArgv()
	if m.GetInteractive() {
		margv = interactiveArgv(margv, r.ident, r.image)
	}
	argv := make([]string, len(margv))
	var scriptArgs []string
	for i, arg := range margv {
		p, err := resolveScript(a.scriptsDir, arg)
		if err != nil {
			return nil, nil, err
		}
		if p != arg {
			scriptArgs = append(scriptArgs, p)
		}
		argv[i] = p
	}
	if r.dirs, err = a.iso.MakeRunDirs(m, r.ident); err != nil {
		return nil, nil, err
	}
	od, err := outputs.OpenDir(r.dirs.Out, r.ident)
	if err != nil {
		return nil, nil, err
	}
	r.outs = a.out.NewFiles(r.id, r.attempt, r.fence, r.log, func(line string) { runNote(r, line) }, od)
	r.outs.SetInputDir(r.dirs.In)
	dir := r.dirs.Private // what it writes where it is is its own, not an output
	if wd != "" {
		dir = wd
	}
	r.cacheDir, r.cacheDone = a.caches.Acquire(m.GetUser(), r.ident)
	var mpsEnv []string
	if r.fractional() && a.mps != nil {
		if mpsEnv, r.mpsDone, err = a.mps.acquire(r, runUID(r.ident)); err != nil {
			return nil, nil, err
		}
	}
	if err := pickMasterPort(m); err != nil {
		return nil, nil, err
	}
	host := inheritedEnv(r.ident)
	r.hostEnv = len(host)
	env := append(append(host, a.runVars(m, r.dirs, r.cacheDir, r.ident)...), mpsEnv...) // the last value of a name counts
	if r.py, err = a.pythonEnv(m, r, dir, env); err != nil {
		return nil, nil, err
	}
	if r.py != nil && !r.py.toBuild() {
		env = r.py.apply(env)
	}
	// Exec, never a shell. argv[0] is looked up in the run's PATH as its
	// uid would (resolve); exec.Command would use the worker's. A run with
	// a code snapshot is resolved in it once it is made (code.go), one
	// whose Python env is built once that is (buildEnv).
	cmd := &exec.Cmd{Args: argv, Env: env}
	r.scriptArgs = scriptArgs
	// Its control group first: a run in an image names it to the runtime.
	if r.cg, err = a.cg.Create(m.GetTaskId(), m.GetAttempt(), m.GetFence(), cgroup.Limits{CPUMillis: m.GetCpuMillis(),
		MemoryMB: m.GetMemoryMb(), GPUs: r.gpus, Near: nearCores(a.cfg.GPUs, r.gpus)}); err != nil {
		return nil, nil, err
	}
	if m.GetCodeTree() == "" {
		if err := a.resolve(r, m, cmd, dir); err != nil {
			return nil, nil, err
		}
	}
	cred := r.ident.Credential()
	if r.image {
		cred = nil // the runtime runs as the worker, the run in its image as its uid (--user)
	}
	cmd.SysProcAttr = isolation.ProcAttr(cred)
	if m.GetInteractive() {
		// The PTY stands in for the pipe (terminal.go).
		ptmx, tty, err := openTerminal(cmd, r.ident)
		if err != nil {
			return nil, nil, err
		}
		r.pipe = ptmx
		r.term = newTerm(ptmx, m.GetEnv()[core.RecordEnv] != "0")
		r.term.port = appPort(m.GetEnv())
		return cmd, tty, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot create output pipe: %w", err)
	}
	cmd.Stdout = pw // one pipe for both keeps their order
	cmd.Stderr = pw
	r.pipe = pr
	return cmd, pw, nil
}

// lookPath resolves argv[0] as the run's uid would (isolation.LookPath).
// A python its uid cannot execute is replaced by the operator's RUN_PYTHON
// when one is set, and the run's own log says so (issue 27): the
// interpreter is never swapped silently.
func (a *agent) lookPath(r *run, name, pathEnv, dir string) (string, error) {
	path, err := isolation.LookPath(name, pathEnv, dir, r.ident)
	var u *isolation.Unreachable
	if err == nil || a.cfg.RunPython == "" || !errors.As(err, &u) || !isolation.IsPythonName(name) {
		return path, err
	}
	if _, perr := isolation.LookPath(a.cfg.RunPython, "", dir, r.ident); perr != nil {
		return "", fmt.Errorf("%w; and RUN_PYTHON %s cannot be used either: %v", err, a.cfg.RunPython, perr)
	}
	runNote(r, fmt.Sprintf("%s resolves to %s, which %s cannot execute (%v); running RUN_PYTHON %s instead, as this worker's operator configured",
		name, u.Path, u.ID, u.Why, a.cfg.RunPython))
	return a.cfg.RunPython, nil
}

// buildEnv reads r's requirements file where it starts, builds its Python
// env or waits for its build (envs.build), holds it for r, and looks the
// run's command up on the PATH that has the env's bin first.
func (a *agent) buildEnv(r *run, cmd *exec.Cmd) error {
	if err := a.resolveEnv(r, r.py, cmd.Dir, cmd.Env); err != nil {
		return err
	}
	cmd.Env = r.py.apply(cmd.Env)
	release, err := a.envs.build(r, r.py, isolation.CacheEnv(r.cacheDir), r.dirs.Private)
	if err != nil {
		return err
	}
	r.envDone = release
	cmd.Path, err = a.lookPath(r, cmd.Args[0], envValue(cmd.Env, "PATH"), cmd.Dir)
	return err
}

// runNote writes one line of the worker's into the run's own log (where
// its owner looks first) and into the worker's.
func runNote(r *run, msg string) {
	_, _ = fmt.Fprintf(r.out, "[rlsched] %s\n", msg)
	r.log.Info().Msg(msg)
}

// checkTaskEnv refuses a task env that names a variable rlsched reserves
// (core.ReservedEnv, the rule the REST API applies at submit: the GPUs and
// identity the worker sets, device selection, loader variables), or a name no
// environment can hold.
func checkTaskEnv(env map[string]string, interactive bool) error {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same task always gets the same error
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("invalid env name %q", k)
		}
		if (k == core.RecordEnv || k == core.PortEnv || k == core.BaseURLEnv) && interactive {
			continue // the master's, for record: false and a web app
		}
		if why := core.ReservedEnv(k); why != "" {
			return fmt.Errorf("env %s is refused: %s; remove it from the task", k, why)
		}
	}
	return nil
}

// inheritedEnv is the worker's environment without secrets and, for a run
// under its own uid, without what describes the worker's user.
func inheritedEnv(id *isolation.Identity) []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !secure.IsSecretEnv(k) && !isolation.DropIdentityEnv(id, k) {
			env = append(env, kv)
		}
	}
	return env
}

// envValue is the value exec.Cmd would use for key: the last one in env.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// runVars returns the run's variables, which follow the worker's
// environment less secrets (inheritedEnv) in its env: its own
// (isolation.IdentityEnv: its private TMPDIR, and under a uid of its own
// HOME, USER and LOGNAME; its user's cache dir when it has one), then the
// task's env, checked by checkTaskEnv.
func (a *agent) runVars(m *pb.ExecuteTask, dirs isolation.RunDirs, cacheDir string, id *isolation.Identity) []string {
	gpus := make([]string, len(m.GetGpuIndices()))
	for i, g := range m.GetGpuIndices() {
		gpus[i] = strconv.Itoa(int(g))
	}
	env := append([]string(nil),
		"CUDA_VISIBLE_DEVICES="+strings.Join(gpus, ","),
		// nvidia-smi numbers GPUs in PCI bus order, CUDA by default fastest
		// first: without this, CUDA_VISIBLE_DEVICES could name another GPU.
		"CUDA_DEVICE_ORDER=PCI_BUS_ID",
		"RLSCHED_TASK_ID="+m.GetTaskId(),
		"RLSCHED_ATTEMPT="+strconv.Itoa(int(m.GetAttempt())),
		"RLSCHED_TRACE_ID="+m.GetTraceId(),
		"RLSCHED_PARAMS="+m.GetParamsJson(),
		"RLSCHED_OUTPUT_DIR="+dirs.Out,
		"PYTHONUNBUFFERED=1",
	)
	env = append(env, shareEnv(m.GetGpuFraction(), m.GetGpuMemoryMb())...)
	env = append(env, groupEnv(m)...) // a multi-node group's member (group.go)
	if m.GetResume() {
		env = append(env, "RLSCHED_RESUME=1") // the outputs of earlier attempts are in RLSCHED_OUTPUT_DIR
	}
	for i, p := range m.GetParents() { // the runs it waited for (issue 29)
		env = append(env, "RLSCHED_PARENT_"+strconv.Itoa(i+1)+"="+p)
	}
	if dirs.In != "" {
		env = append(env, "RLSCHED_INPUT_DIR="+dirs.In) // its parents' outputs, RLSCHED_INPUT_DIR/<id>/
	}
	env = append(env, isolation.IdentityEnv(id, dirs.Private)...)
	env = append(env, isolation.CacheEnv(cacheDir)...)
	pythonPath := os.Getenv("PYTHONPATH")
	keys := make([]string, 0, len(m.GetEnv()))
	for k := range m.GetEnv() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v := m.GetEnv()[k]; k == "PYTHONPATH" {
			pythonPath = v
		} else {
			env = append(env, k+"="+v)
		}
	}
	if pythonPath != "" {
		pythonPath = a.scriptsDir + string(os.PathListSeparator) + pythonPath
	} else {
		pythonPath = a.scriptsDir
	}
	// exec.Cmd keeps the last value of a duplicated name.
	return append(env, "PYTHONPATH="+pythonPath)
}

// pump copies the run's merged output into its spool until EOF. A full
// spool blocks it, and so the run (back-pressure).
func (a *agent) pump(r *run) {
	defer close(r.pumped)
	buf := make([]byte, logChunk)
	unkicked := 0
	for {
		if r.exited.Load() {
			_ = r.pipe.SetReadDeadline(time.Now().Add(drainTimeout))
		}
		n, err := r.pipe.Read(buf)
		if n > 0 && r.term != nil {
			r.term.output(buf[:n])
			a.kick() // a keystroke's echo leaves at once, not at the flush tick
		}
		if n > 0 && (r.term == nil || r.term.record) {
			_, _ = r.out.Write(buf[:n])
			r.last.Write(buf[:n])
			if unkicked += n; unkicked >= logChunk {
				a.kick() // a full batch: send before the flush tick
				unkicked = 0
			}
		}
		if err != nil {
			if r.term != nil && errors.Is(err, syscall.EIO) {
				break // a PTY's master reads EIO once no process holds the terminal: its end
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				r.log.Warn().Msg("a process that left the run's group still holds its output pipe; no longer reading it")
			} else if err != io.EOF {
				r.log.Warn().Err(err).Msg("cannot read run output")
			}
			break
		}
	}
	if r.term != nil {
		r.term.end()
	}
	r.pipe.Close()
}

// reap waits for the run's leader, kills what is left of its control group
// and process group, waits for the output to be read, adds the verdict of
// its control group, and records the report.
func (a *agent) reap(r *run) {
	waitErr := r.cmd.Wait()
	exitedAt := time.Now()
	pgid, started, stopErr := a.tab.reaped(r)

	// Nothing of the run may outlive its leader: background children of a
	// finished run would hold GPUs nobody accounts for. Its control group
	// holds every process it started, whatever their session or uid.
	if n, err := r.cg.Kill(cgroupKillTimeout); err != nil {
		r.log.Error().Err(err).Str("cgroup", r.cg.Dir()).Msg("cannot kill every process of the run's control group")
	} else if n > 0 {
		r.log.Info().Int("killed", n).Msg("killed processes the run left in its control group")
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
		r.log.Info().Int("pgid", pgid).Msg("killed processes the run left in its group")
	}
	a.iso.Sweep(r.ident, r.log) // and, under a uid of its own, those that left the group
	if r.image {
		a.removeContainer(r)
	}
	use := r.cg.Usage()
	r.exited.Store(true)
	_ = r.pipe.SetReadDeadline(time.Now().Add(drainTimeout))
	<-r.pumped
	r.outs.CheckLast() // what its last sync will not upload, said in its log before it closes
	if stopErr != "" {
		_, _ = fmt.Fprintf(r.out, "\n[rlsched] stopped by the worker: the run %s\n", stopErr)
	}
	if msg := use.Message(); msg != "" && failed(r.cmd.ProcessState) {
		// The last line of its log says why, where its owner looks first.
		_, _ = fmt.Fprintf(r.out, "\n[rlsched] warning: %s\n", msg)
		r.log.Warn().Str("reason", use.Reason()).Int64("peak_memory_mb", use.PeakMemoryMB).Msg(msg)
	} else if stopErr == "" && failed(r.cmd.ProcessState) {
		if r.hint = missingModuleHint(r.last.String()); r.hint != "" {
			runNote(r, r.hint) // the last line of its log, and its error (finishedMsg)
		}
	}
	// The log closes once the last sync of its outputs wrote what it did
	// not keep into it (runTable.collectLocked).
	r.cg.Remove()
	if err := a.guard.Remove(pgid); err != nil {
		r.log.Error().Err(err).Msg("guard")
	}
	r.releaseCache() // its processes are gone, and its uid not yet given back
	r.releaseMPS()
	r.releaseEnv()
	// Nothing of the run runs any more: its GPUs are free for the next run
	// while its uid is cleaned up and its outputs' last sync goes on
	// (issue 33). The uid is not the next run's: each run takes another
	// (uidPool), and this one's is freed only once its files are back in
	// the worker's hands (Release).
	a.tab.exited(r)
	a.iso.Release(r.ident, r.dirs, r.log)
	a.tab.ended(r, waitErr, exitedAt.Sub(started), use)
}

// failed: the process did not exit 0 (a signal, or a non-zero status).
func failed(ps *os.ProcessState) bool {
	return ps == nil || !ps.Success()
}

// gpuInts converts ExecuteTask.gpu_indices.
func gpuInts(idx []int32) []int {
	out := make([]int, len(idx))
	for i, g := range idx {
		out[i] = int(g)
	}
	return out
}

// runUID is the uid a run's processes have: its own, or the worker's.
func runUID(id *isolation.Identity) uint32 {
	if id == nil {
		return uint32(os.Getuid())
	}
	return id.UID()
}
