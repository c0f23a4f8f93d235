package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
)

func init() {
	register(&command{
		name:    "submit",
		args:    "[flags] (--algorithm A [--episodes N] [--lr X] | -- COMMAND [ARG...])",
		summary: "Submit a training run (POST /api/train) and print its id.",
		details: `Either run the configured default trainer with --algorithm (and --episodes, --lr), or run
your own command: everything after -- is the argv, run without a shell on the worker.

The run runs a snapshot of your code, taken now: in a git work tree every tracked file as it
is in the working tree and every untracked file git does not ignore; elsewhere the current
directory less what its .rlschedignore (gitignore syntax) names. Only the files the master
does not have yet are uploaded. The run starts in the snapshot's copy of the current
directory (RLSCHED_CODE_DIR), so editing a file after submitting changes no run. --code DIR
snapshots DIR's tree instead; --no-code (or --workdir DIR) sends none, and the run runs in
--workdir on the worker (default: the current directory, which must exist there too). A run of
the default trainer (--algorithm) sends no snapshot unless --code is given.

--param KEY=VALUE sets a hyperparameter: VALUE is sent as a JSON number or boolean when it
reads as one (3, 1e-4, true), else as a string. Params are appended to the argv as
--KEY VALUE and given to the run as RLSCHED_PARAMS (JSON).

When the current directory is in a git repository, the commit, whether the tree is dirty,
the upstream (else origin) remote without credentials and the uncommitted changes
(git diff HEAD, binary files summarised, at most 2 MiB) are recorded with the run; untracked
files are not in the diff (git add -N makes them part of it). The diff is shown only to you
and the admins: rlsched diff ID.

--resume-from ID starts the run with the newest files of run ID's output directory and
RLSCHED_RESUME=1 (scripts/train.py then continues from its checkpoint.json).

Only the id is printed on standard output, so id=$(rlsched submit ...) works. With --wait the
progress and the final status go to standard error and the exit code is 0 only when the run
SUCCEEDED.`,
		examples: []string{
			"rlsched submit --algorithm ppo --episodes 500 --lr 3e-4",
			"rlsched submit --gpus 1 --param seed=3 --tag sweep -- python3 train.py --env CartPole-v1",
			"id=$(rlsched submit --project cartpole -- python3 train.py) && rlsched logs -f $id",
			"rlsched submit --wait --timeout 2h -- python3 train.py",
			"rlsched submit --resume-from $id --algorithm ppo --episodes 1000",
			"rlsched submit --gpus 2 --preemptible --grace 60 -- python3 train.py",
		},
		argv: true,
		run:  runSubmit,
	})
}

// submitRequest is POST /api/train's body; unset fields are left to the server.
type submitRequest struct {
	Name           string            `json:"name,omitempty"`
	Project        string            `json:"project,omitempty"`
	Command        []string          `json:"command,omitempty"`
	Algorithm      string            `json:"algorithm,omitempty"`
	Episodes       *int              `json:"episodes,omitempty"`
	LearningRate   *float64          `json:"learningRate,omitempty"`
	Params         map[string]any    `json:"params,omitempty"`
	GPUs           *float64          `json:"gpus,omitempty"`
	Priority       *int              `json:"priority,omitempty"`
	MaxRetries     *int              `json:"maxRetries,omitempty"`
	TimeoutSeconds *int64            `json:"timeoutSeconds,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Workdir        string            `json:"workdir,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	Code           *codeRequest      `json:"code,omitempty"`
	ResumeFrom     string            `json:"resumeFrom,omitempty"`
	Preemptible    bool              `json:"preemptible,omitempty"`
	PreemptGrace   *int              `json:"preemptGraceSeconds,omitempty"`
	Private        bool              `json:"private,omitempty"`
	CPUs           *float64          `json:"cpus,omitempty"`
	MemoryMB       *int64            `json:"memoryMb,omitempty"`
	GPUMemoryMB    *int64            `json:"gpuMemoryMb,omitempty"`
	GPUType        []string          `json:"gpuType,omitempty"`
	Constraints    map[string]string `json:"constraints,omitempty"`
	After          []afterRequest    `json:"after,omitempty"`
	InputsFrom     []string          `json:"inputsFrom,omitempty"`
	Python         *core.PythonEnv   `json:"python,omitempty"`
	Image          string            `json:"image,omitempty"`
	Nodes          *int              `json:"nodes,omitempty"`
	// Kind and Record: an interactive session (rlsched shell).
	Kind   string `json:"kind,omitempty"`
	Record *bool  `json:"record,omitempty"`
	// Port: a session's web app (rlsched notebook).
	Port int `json:"port,omitempty"`
}

// submitAnswer is POST /api/train's and POST /api/tasks/{id}/rerun's answer.
type submitAnswer struct {
	ID      string      `json:"id"`
	Status  core.Status `json:"status"`
	TraceID string      `json:"traceId"`
}

// waitFlags are --wait, --follow and --json, shared by submit and rerun.
type waitFlags struct{ wait, follow, json bool }

func (inv *invocation) addWaitFlags(w *waitFlags) {
	inv.fs.BoolVar(&w.wait, "wait", false, "wait for the run to end, showing its status; exit 0 only if it SUCCEEDED")
	inv.fs.BoolVar(&w.follow, "follow", false, "stream the run's output while waiting (implies --wait)")
	inv.fs.BoolVar(&w.json, "json", false, "print the server's JSON (with --wait: the finished run's)")
}

func (inv *invocation) checkWaitFlags(w *waitFlags) (int, bool) {
	if w.follow && w.json {
		return inv.usageError("--follow and --json both write to standard output: pick one"), false
	}
	if w.follow {
		w.wait = true
	}
	return ExitOK, true
}

// runFlags are the flags that describe a run, shared by submit and sweep
// (where they describe the base every member shares).
type runFlags struct {
	req                      submitRequest
	episodes, prio, retry    int
	grace, nodes             int
	lr, cpus, gpus           float64
	timeout, workdir, memory string
	gpuMemory                string
	params, envs, tags       multiFlag
	gpuTypes, constraints    multiFlag
	deps                     depFlags // deps.go
	requirements, venv       string   // the run's Python environment (pyenv.go)
	codeDir                  string   // --code DIR
	noCode                   bool
}

func (rf *runFlags) define(fs *flagSet) {
	fs.StringVar(&rf.req.Algorithm, "algorithm", "", "run the default trainer with algorithm `A` (e.g. ppo, dqn)")
	fs.IntVar(&rf.episodes, "episodes", 0, "`N` episodes for --algorithm")
	fs.Float64Var(&rf.lr, "lr", 0, "learning rate `X` for --algorithm")
	fs.Var(&rf.params, "param", "hyperparameter `KEY=VALUE` (repeatable; numbers and booleans are typed)")
	fs.Var(&rf.envs, "env", "set `NAME=VALUE` in the run's environment (repeatable)")
	fs.Float64Var(&rf.gpus, "gpus", 0, "`N` GPUs the run needs: whole GPUs, or a fraction of one shared with other fractional runs (0.25, 0.5)")
	fs.IntVar(&rf.nodes, "nodes", 1, "span `N` workers at once (a multi-node group: --gpus on each; all start together or none)")
	fs.StringVar(&rf.gpuMemory, "gpu-memory", "", "GPU memory each GPU must have, `SIZE` such as 40GiB or MiB (a fractional run gets that much of its GPU's)")
	fs.Var(&rf.gpuTypes, "gpu-type", "run only on GPUs whose name contains `NAME` such as A100 (repeatable: any of them)")
	fs.Var(&rf.constraints, "constraint", "run only on workers with label `KEY=VALUE`, or without it with '!KEY=VALUE' (repeatable: all must hold)")
	fs.Float64Var(&rf.cpus, "cpus", 0, "`N` CPU cores the run needs, fractions allowed (default: the master's, per GPU for a GPU run)")
	fs.StringVar(&rf.memory, "memory", "", "memory the run needs, `SIZE` such as 16GiB or 512MiB (default: the master's); past it the run is stopped, out of memory")
	fs.IntVar(&rf.prio, "priority", 0, "priority `N`: higher runs first (above 0: admins only)")
	fs.IntVar(&rf.retry, "max-retries", 1, "requeue a LOST run (its worker vanished) up to `N` times")
	fs.StringVar(&rf.timeout, "timeout", "", "wall-clock limit, `SECONDS` or a duration like 2h30m; then the run ends as TIMEOUT")
	fs.StringVar(&rf.req.Name, "name", "", "display `NAME` (default derived from the algorithm or command)")
	fs.StringVar(&rf.req.Project, "project", "", "`PROJECT` to group runs for comparison")
	fs.Var(&rf.tags, "tag", "add `TAG` to the run (repeatable)")
	fs.StringVar(&rf.workdir, "workdir", "", "`DIR` on the worker (default for a command: the current directory)")
	fs.BoolVar(&rf.req.Preemptible, "preemptible", false, "the run may be stopped (SIGTERM, --grace, SIGKILL) for a run of higher priority, and is requeued to resume from its checkpoint")
	fs.IntVar(&rf.grace, "grace", 0, "`SECONDS` a preempted run has to checkpoint before SIGKILL (default 30, at most 600)")
	fs.BoolVar(&rf.req.Private, "private", false, "only you and admins may read the run's output files and resume from them")
	rf.deps.define(fs)
	rf.definePython(fs)
	defineImage(fs, &rf.req)
	rf.defineCode(fs)
}

// defineImage adds --image, the container image a run runs in (issue 27).
func defineImage(fs *flagSet, req *submitRequest) {
	fs.StringVar(&req.Image, "image", "", "run in container image `NAME` (e.g. pytorch/pytorch:2.3.0) with its code mounted, on a worker with podman")
}

// defineCode adds --code and --no-code, the run's code snapshot (issue 27).
func (rf *runFlags) defineCode(fs *flagSet) {
	fs.StringVar(&rf.codeDir, "code", "", "snapshot the tree of `DIR` (its git work tree, else DIR less .rlschedignore) instead of the current directory's")
	fs.BoolVar(&rf.noCode, "no-code", false, "send no code snapshot: the run runs in --workdir on the worker (a shared file system)")
}

// request checks the flags and the command after -- and builds the run's
// request; ok=false means the command is over with exit code code.
func (inv *invocation) request(fs *flagSet, p parsed, rf *runFlags) (req submitRequest, code int, ok bool) {
	req = rf.req
	name := inv.cmd.name
	switch {
	case req.Algorithm != "" && p.dash:
		return req, inv.usageError("give either --algorithm or a command after --, not both"), false
	case req.Algorithm == "" && !p.dash:
		return req, inv.usageError("nothing to run: give --algorithm A, or a command after -- (rlsched %s -- python3 train.py)", name), false
	case p.dash && len(p.rest) == 0:
		return req, inv.usageError("empty command after --"), false
	case p.dash && (fs.isSet("episodes") || fs.isSet("lr")):
		return req, inv.usageError("--episodes and --lr go with --algorithm; for a command use --param episodes=N"), false
	}
	if p.dash {
		req.Command = p.rest
		req.Workdir = inv.env.Dir
	}
	if fs.isSet("episodes") {
		if rf.episodes <= 0 {
			return req, inv.usageError("--episodes must be positive"), false
		}
		req.Episodes = &rf.episodes
	}
	if fs.isSet("lr") {
		if !(rf.lr > 0) || math.IsInf(rf.lr, 0) {
			return req, inv.usageError("--lr must be a positive number"), false
		}
		req.LearningRate = &rf.lr
	}
	if fs.isSet("workdir") {
		if rf.workdir == "" {
			return req, inv.usageError("--workdir is empty"), false
		}
		req.Workdir = rf.workdir
		if !filepath.IsAbs(req.Workdir) { // the API takes absolute paths only
			req.Workdir = filepath.Join(inv.env.Dir, req.Workdir)
		}
	}
	if problem := rf.deps.apply(&req); problem != "" {
		return req, inv.usageError("%s", problem), false
	}
	var err error
	if req.Params, err = parseParams(rf.params, nil); err != nil {
		return req, inv.usageError("%v", err), false
	}
	for _, kv := range rf.envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, "\x00") {
			return req, inv.usageError("--env wants NAME=VALUE, got %q", kv), false
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	for _, t := range rf.tags {
		if strings.TrimSpace(t) == "" {
			return req, inv.usageError("empty --tag"), false
		}
		req.Tags = append(req.Tags, t)
	}
	for _, f := range []struct {
		name string
		v    *int
		dst  **int
	}{{"priority", &rf.prio, &req.Priority}, {"max-retries", &rf.retry, &req.MaxRetries}} {
		if !fs.isSet(f.name) {
			continue
		}
		if *f.v < 0 && f.name != "priority" {
			return req, inv.usageError("--%s must not be negative", f.name), false
		}
		*f.dst = f.v
	}
	if fs.isSet("gpus") {
		// The master says what is wrong with a fraction (0.333, 1.5).
		if rf.gpus < 0 || math.IsNaN(rf.gpus) || math.IsInf(rf.gpus, 0) {
			return req, inv.usageError("--gpus must not be negative"), false
		}
		req.GPUs = &rf.gpus
	}
	if fs.isSet("nodes") {
		// The master says what is out of range (0, 1000).
		req.Nodes = &rf.nodes
	}
	if fs.isSet("gpu-memory") {
		mb, err := parseMemory(rf.gpuMemory)
		if err != nil {
			return req, inv.usageError("%s", strings.Replace(err.Error(), "--memory", "--gpu-memory", 1)), false
		}
		req.GPUMemoryMB = &mb
	}
	for _, n := range rf.gpuTypes {
		if strings.TrimSpace(n) == "" {
			return req, inv.usageError("empty --gpu-type"), false
		}
		req.GPUType = append(req.GPUType, n)
	}
	for _, c := range rf.constraints {
		k, v, ok := strings.Cut(c, "=")
		if !ok || strings.TrimPrefix(k, "!") == "" {
			return req, inv.usageError("--constraint %q: want KEY=VALUE or '!KEY=VALUE'", c), false
		}
		if req.Constraints == nil {
			req.Constraints = map[string]string{}
		}
		req.Constraints[k] = v
	}
	if fs.isSet("cpus") {
		if !(rf.cpus > 0) || math.IsInf(rf.cpus, 0) {
			return req, inv.usageError("--cpus must be a positive number of cores, e.g. 4 or 0.5"), false
		}
		req.CPUs = &rf.cpus
	}
	if fs.isSet("memory") {
		mb, err := parseMemory(rf.memory)
		if err != nil {
			return req, inv.usageError("%v", err), false
		}
		req.MemoryMB = &mb
	}
	if fs.isSet("grace") {
		if rf.grace < 0 || rf.grace > 600 {
			return req, inv.usageError("--grace must be 0..600 seconds"), false
		}
		req.PreemptGrace = &rf.grace
	}
	if fs.isSet("timeout") {
		secs, err := parseTimeout(rf.timeout)
		if err != nil {
			return req, inv.usageError("%v", err), false
		}
		req.TimeoutSeconds = &secs
	}
	if code, ok := inv.pythonEnv(fs, rf, &req); !ok {
		return req, code, false
	}
	if code, ok := inv.checkImage(&req); !ok {
		return req, code, false
	}
	if code, ok := inv.codeRequest(fs, rf, &req); !ok {
		return req, code, false
	}
	return req, ExitOK, true
}

// checkImage checks --image, and that it comes without a Python env.
func (inv *invocation) checkImage(req *submitRequest) (int, bool) {
	if err := core.CheckImage(req.Image); err != nil {
		return inv.usageError("--%v", err), false
	}
	if req.Image != "" && req.Python != nil {
		return inv.usageError("--image runs in the image's own Python: install the requirements in it, and drop --requirements or --venv"), false
	}
	return ExitOK, true
}

// codeRequest checks --code against --no-code and --workdir and records
// the git state of the tree the snapshot is taken of.
func (inv *invocation) codeRequest(fs *flagSet, rf *runFlags, req *submitRequest) (int, bool) {
	if rf.noCode && rf.codeDir != "" {
		return inv.usageError("give --code DIR or --no-code, not both"), false
	}
	if fs.isSet("workdir") && rf.codeDir != "" {
		return inv.usageError("--workdir runs in a directory of the worker, --code in a snapshot: give one"), false
	}
	req.Code = gitCode(inv.ctx, rf.codeSource(inv))
	fitDiff(req)
	return ExitOK, true
}

func runSubmit(inv *invocation, args []string) int {
	fs := inv.newFlags()
	var rf runFlags
	var w waitFlags
	rf.define(fs)
	fs.StringVar(&rf.req.ResumeFrom, "resume-from", "", "start with the output files of run `ID` in RLSCHED_OUTPUT_DIR, and RLSCHED_RESUME=1")
	inv.addWaitFlags(&w)
	p := fs.parse(args)
	if !p.help && p.problem == "" && len(p.pos) > 0 {
		return inv.usageError("unexpected argument %q: put the command to run after --, e.g. rlsched submit -- python3 train.py", p.pos[0])
	}
	p, code, ok := inv.startParsed(p, 0, 0)
	if !ok {
		return code
	}
	if code, ok := inv.checkWaitFlags(&w); !ok {
		return code
	}
	req, code, ok := inv.request(fs, p, &rf)
	if !ok {
		return code
	}
	if fs.isSet("resume-from") && !core.ValidTaskID(req.ResumeFrom) {
		return inv.usageError("invalid --resume-from %q: give the id of the run whose files to start from", req.ResumeFrom)
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if err := inv.attachCode(c, &req, &rf, fs); err != nil {
		return inv.fail(err)
	}
	var ans submitAnswer
	raw, err := c.postJSON(inv.ctx, "/api/train", req, &ans)
	if err != nil {
		return inv.fail(err)
	}
	return inv.submitted(c, ans, raw, w)
}

// submitted prints the new run's id (or JSON) and waits when asked.
func (inv *invocation) submitted(c *client, ans submitAnswer, raw []byte, w waitFlags) int {
	if ans.ID == "" {
		return inv.fail(fmt.Errorf("the server accepted the run but sent no id: %s", fitWidth(string(raw), 200)))
	}
	if w.json && !w.wait {
		return inv.printJSON(raw)
	}
	if !w.json {
		fmt.Fprintln(inv.env.Stdout, ans.ID)
	}
	if !w.wait {
		return ExitOK
	}
	return inv.waitRun(c, ans.ID, w)
}

// parseParams turns KEY=VALUE strings into a params object on top of base.
// VALUE becomes a JSON number or boolean when it is one, else a string.
func parseParams(kvs []string, base map[string]any) (map[string]any, error) {
	out := base
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param wants KEY=VALUE, got %q", kv)
		}
		if out == nil {
			out = map[string]any{}
		}
		out[k] = paramValue(v)
	}
	return out, nil
}

func paramValue(v string) any {
	switch v {
	case "true":
		return true
	case "false":
		return false
	}
	if v != "" && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') && json.Valid([]byte(v)) {
		return json.Number(v) // kept as written: 3 stays an integer, 1e-4 stays 1e-4
	}
	return v
}

// parseTimeout reads "3600" (seconds) or a Go duration ("2h30m") as seconds.
func parseTimeout(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("--timeout must be positive, got %s", s)
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid --timeout %q: give seconds (3600) or a duration (90m, 2h30m)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("--timeout must be positive, got %s", s)
	}
	return int64(math.Ceil(d.Seconds())), nil
}
