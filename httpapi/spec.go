package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/sweep"
)

// Limits of a submission (API.md "Runs").
const (
	defaultEpisodes   = 200
	maxEpisodes       = 1_000_000
	maxGPUs           = 64
	maxPriority       = 1000
	defaultMaxRetries = 1
	maxMaxRetries     = 100
	maxTimeoutSeconds = 1_000_000_000 // ~31 years; keeps seconds×1e9 inside a Duration
	maxNameChars      = 200
	maxProjectChars   = 200
	maxTags           = 32
	maxTagChars       = 64
	maxWorkdirBytes   = 4096
	maxParams         = 256
	// maxParamsDepth bounds the nesting of params (the object itself is
	// level 1): every reader of a run's params, here and in each run's own
	// code, walks it recursively.
	maxParamsDepth = 32
)

var (
	algorithmRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	envKeyRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// submitBody is POST /api/train's body, also the override body of rerun
// and, re-encoded, a sweep's stored base (storedSpec: so omitempty).
// Pointers tell an absent field from a zero one; JSON null counts as absent.
// A "userId" field is deliberately not read: the owner is the token's user.
type submitBody struct {
	Name           *string            `json:"name,omitempty"`
	Project        *string            `json:"project,omitempty"`
	Command        *[]string          `json:"command,omitempty"`
	Algorithm      *string            `json:"algorithm,omitempty"`
	Episodes       *int64             `json:"episodes,omitempty"`
	LearningRate   *float64           `json:"learningRate,omitempty"`
	Params         json.RawMessage    `json:"params,omitempty"`
	GPUs           *float64           `json:"gpus,omitempty"`
	Priority       *int64             `json:"priority,omitempty"`
	MaxRetries     *int64             `json:"maxRetries,omitempty"`
	TimeoutSeconds *int64             `json:"timeoutSeconds,omitempty"`
	Env            *map[string]string `json:"env,omitempty"`
	Workdir        *string            `json:"workdir,omitempty"`
	Tags           *[]string          `json:"tags,omitempty"`
	Code           *submitCode        `json:"code,omitempty"`
	// ResumeFrom names a run whose output files the new run starts with
	// (API.md "Resume"); a rerun does not inherit its original's.
	ResumeFrom *string `json:"resumeFrom,omitempty"`
	// Preemptible and PreemptGraceSeconds: the run may be preempted for a
	// run of higher priority, with this long to checkpoint (API.md
	// "Scheduling policy").
	Preemptible         *bool  `json:"preemptible,omitempty"`
	PreemptGraceSeconds *int64 `json:"preemptGraceSeconds,omitempty"`
	// Private limits the run's outputs, and resuming from them, to its
	// owner and admins (API.md "Who may read what").
	Private *bool `json:"private,omitempty"`
	// CPUs (cores, fractions allowed) and MemoryMB (MiB) are what the run
	// asks for; absent: the master's defaults (API.md "Resources").
	CPUs     *float64 `json:"cpus,omitempty"`
	MemoryMB *int64   `json:"memoryMb,omitempty"`
	// GPUMemoryMB, GPUType (a name or a list) and Constraints say where
	// it may go (API.md "Placement", placement.go).
	GPUMemoryMB *int64             `json:"gpuMemoryMb,omitempty"`
	GPUType     json.RawMessage    `json:"gpuType,omitempty"`
	Constraints *map[string]string `json:"constraints,omitempty"`
	// After and InputsFrom: the runs (or sweeps) this one waits for, and
	// those whose outputs it starts with (deps.go; a rerun keeps neither).
	After      *[]afterItem `json:"after,omitempty"`
	InputsFrom *[]string    `json:"inputsFrom,omitempty"`
	// Python is the run's Python environment (API.md "Python
	// environments"): a requirements file of its code, or a venv.
	Python *core.PythonEnv `json:"python,omitempty"`
	// Image is the container image the run runs in (API.md "Container
	// images", core.CheckImage); "" in a rerun's overrides: none.
	Image *string `json:"image,omitempty"`
	// Kind is "batch" (the default) or "interactive": a terminal the owner
	// attaches to (API.md "Interactive sessions"), whose command may be
	// absent (the login shell of the run's uid). Record false keeps an
	// interactive run's terminal out of its log.
	Kind   *string `json:"kind,omitempty"`
	Record *bool   `json:"record,omitempty"`
	// Port: an interactive run's web app listens there on its worker's
	// loopback; the master proxies it at /sessions/<id>/ (sessionapp.go).
	Port *int64 `json:"port,omitempty"`
	// Nodes: the workers the run spans at once, gpus on each (issue 29,
	// core.Task.Nodes); a rerun keeps it.
	Nodes *int64 `json:"nodes,omitempty"`
}

// submitCode is a submission's code: core.CodeInfo as the client knows it,
// with the diff itself, which the Task never carries (it is stored apart,
// by content). hasDiff is the server's to say, so it is not read.
type submitCode struct {
	GitCommit   string `json:"gitCommit,omitempty"`
	GitDirty    bool   `json:"gitDirty,omitempty"`
	GitRemote   string `json:"gitRemote,omitempty"`
	Diff        string `json:"diff,omitempty"`
	DiffOmitted string `json:"diffOmitted,omitempty"`
	// Tree and Subdir name the run's code snapshot (httpapi/code.go).
	Tree   string `json:"tree,omitempty"`
	Subdir string `json:"subdir,omitempty"`
}

// spec is a run's submission, resolved: what a rerun repeats.
type spec struct {
	name    string
	project string
	// base is the argv before the params' "--key value" pairs.
	base []string
	// algo, episodes and lr are set when base is the default trainer's
	// "--algo A --episodes N [--lr X]" form, so a rerun can change one of them.
	algo     string
	episodes int64
	lr       float64
	params   json.RawMessage // a compact JSON object, or nil
	gpus     int
	priority int
	retries  int
	timeout  int
	env      map[string]string
	tags     []string
	workdir  string
	// code is the run's code record; diff, when set, is a new diff that
	// create stores and names in code.DiffID.
	code core.CodeInfo
	diff []byte
	// resumeFrom is a valid run id, checked to exist by checkResumeFrom.
	resumeFrom string
	// preemptible and grace (seconds; 0: the default) of preemption.
	preemptible bool
	grace       int
	// private: only the owner and admins read its outputs.
	private bool
	// cpus and memoryMB the run asks for; 0: the defaults (newRun).
	cpus     float64
	memoryMB int64
	// gpuFraction (beside gpus 0), gpuMemoryMB, gpuType and constraints:
	// where it may go (placement.go).
	gpuFraction float64
	gpuMemoryMB int64
	gpuType     []string
	constraints map[string]string
	// after as submitted (applyDeps), deps the parents it resolves to
	// (resolveDeps), inputsFrom the parents whose outputs it starts with.
	after      []afterItem
	deps       []core.Dep
	inputsFrom []string
	// python is its Python environment; nil: none.
	python *core.PythonEnv
	// image is the container image it runs in; "": none.
	image string
	// kind is core.KindBatch ("" counts as it) or core.KindInteractive;
	// noRecord: an interactive run's terminal is kept out of its log.
	kind     string
	noRecord bool
	// port: an interactive run's web app's port (0: none).
	port int
	// nodes: the workers it spans at once (1: one).
	nodes int
}

func newSpec() spec { return spec{retries: defaultMaxRetries, nodes: 1} }

// specOf recovers the spec of an existing run, for rerun.
func (s *Server) specOf(t core.Task) spec {
	sp := spec{
		name: t.Name, project: t.Project, base: t.Command, gpus: t.GPUs, priority: t.Priority,
		retries: t.MaxRetries, timeout: t.TimeoutSeconds, env: t.Env, tags: t.Tags,
		workdir: t.Workdir, code: t.Code, preemptible: t.Preemptible, grace: t.PreemptGraceSeconds,
		private: t.Private,
		cpus:    t.CPUs, memoryMB: t.MemoryMB,
		gpuFraction: t.GPUFraction, gpuMemoryMB: t.GPUMemoryMB, gpuType: t.GPUType, constraints: t.Constraints,
		python: t.Python, image: t.Image, nodes: t.Group(),
		kind: t.Kind, noRecord: t.Env[core.RecordEnv] == "0", port: t.SessionPort(),
	}
	if p := bytes.TrimSpace(t.Params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		if args, compact, err := paramArgs(p); err == nil {
			sp.params = compact
			if n := len(t.Command) - len(args); n >= 0 && equalStrings(t.Command[n:], args) {
				sp.base = t.Command[:n]
			}
		}
	}
	sp.base = append([]string(nil), sp.base...)
	s.recoverAlgorithm(&sp)
	return sp
}

// recoverAlgorithm fills algo, episodes and lr when sp.base is exactly the
// default trainer's form.
func (s *Server) recoverAlgorithm(sp *spec) {
	tr := s.cfg.DefaultTrainer
	if len(tr) == 0 || len(sp.base) < len(tr)+4 || !equalStrings(sp.base[:len(tr)], tr) {
		return
	}
	rest := sp.base[len(tr):]
	if rest[0] != "--algo" || rest[2] != "--episodes" || !algorithmRe.MatchString(rest[1]) {
		return
	}
	ep, err := strconv.ParseInt(rest[3], 10, 64)
	if err != nil {
		return
	}
	var lr float64
	switch {
	case len(rest) == 4:
	case len(rest) == 6 && rest[4] == "--lr":
		if lr, err = strconv.ParseFloat(rest[5], 64); err != nil {
			return
		}
	default:
		return
	}
	sp.algo, sp.episodes, sp.lr = rest[1], ep, lr
}

// apply validates b and writes its fields over sp.
func (s *Server) apply(sp *spec, b *submitBody) *apiError {
	if b.Command != nil && b.Algorithm != nil {
		return errBadRequest("give either command or algorithm, not both")
	}
	if b.Episodes != nil && (*b.Episodes < 1 || *b.Episodes > maxEpisodes) {
		return errBadRequest("episodes must be 1..%d", maxEpisodes)
	}
	if b.LearningRate != nil && (*b.LearningRate < 0 || math.IsInf(*b.LearningRate, 0) || math.IsNaN(*b.LearningRate)) {
		return errBadRequest("learningRate must be a number ≥ 0 (0: the trainer's default)")
	}
	switch {
	case b.Command != nil:
		if b.Episodes != nil || b.LearningRate != nil {
			return errBadRequest("episodes and learningRate apply only to algorithm runs; put them in command or params")
		}
		cmd := *b.Command
		if len(cmd) == 0 || cmd[0] == "" {
			return errBadRequest("command must be a non-empty argv array whose first element names the program")
		}
		for i, a := range cmd {
			if strings.IndexByte(a, 0) >= 0 {
				return errBadRequest("command[%d] contains a NUL byte", i)
			}
		}
		sp.base = append([]string(nil), cmd...)
		sp.algo = ""
	case b.Algorithm != nil || b.Episodes != nil || b.LearningRate != nil:
		if b.Algorithm == nil && sp.algo == "" {
			return errBadRequest("episodes and learningRate apply only to algorithm runs; give algorithm too")
		}
		if b.Algorithm != nil {
			if !algorithmRe.MatchString(*b.Algorithm) {
				return errBadRequest("algorithm must be 1–32 of [A-Za-z0-9_-]")
			}
			if sp.algo == "" {
				sp.episodes, sp.lr = defaultEpisodes, 0
			}
			sp.algo = *b.Algorithm
		}
		if b.Episodes != nil {
			sp.episodes = *b.Episodes
		}
		if b.LearningRate != nil {
			sp.lr = *b.LearningRate
		}
		if len(s.cfg.DefaultTrainer) == 0 {
			return errBadRequest("this master has no default trainer configured; submit a command instead")
		}
		sp.base = append(append([]string(nil), s.cfg.DefaultTrainer...),
			"--algo", sp.algo, "--episodes", strconv.FormatInt(sp.episodes, 10))
		if sp.lr > 0 {
			sp.base = append(sp.base, "--lr", strconv.FormatFloat(sp.lr, 'g', -1, 64))
		}
	}
	if p := bytes.TrimSpace(b.Params); len(p) > 0 && !bytes.Equal(p, []byte("null")) {
		_, compact, err := paramArgs(p)
		if err != nil {
			return errBadRequest("params: %v", err)
		}
		sp.params = compact
		if bytes.Equal(compact, []byte("{}")) {
			sp.params = nil
		}
	}
	if b.ResumeFrom != nil {
		if !core.ValidTaskID(*b.ResumeFrom) {
			return errBadRequest("resumeFrom must be a run id (1–64 of [A-Za-z0-9_-])")
		}
		sp.resumeFrom = *b.ResumeFrom
	}
	if b.Name != nil {
		if utf8.RuneCountInString(*b.Name) > maxNameChars {
			return errBadRequest("name must be at most %d characters", maxNameChars)
		}
		sp.name = *b.Name
	}
	if b.Project != nil {
		if utf8.RuneCountInString(*b.Project) > maxProjectChars {
			return errBadRequest("project must be at most %d characters", maxProjectChars)
		}
		sp.project = *b.Project
	}
	if e := s.applyPlacement(sp, b); e != nil {
		return e
	}
	if b.Nodes != nil {
		if err := core.CheckNodes(*b.Nodes); err != nil {
			return errBadRequest("nodes %v", err)
		}
		sp.nodes = int(*b.Nodes)
	}
	if sp.nodes > 1 && sp.gpuFraction > 0 {
		return errBadRequest("nodes: a group's members take whole GPUs (or none), not a fraction of one")
	}
	if b.CPUs != nil {
		if err := core.CheckCPUs(*b.CPUs); err != nil {
			return errBadRequest("cpus %v", err)
		}
		sp.cpus = core.RoundCPUs(*b.CPUs)
	}
	if b.MemoryMB != nil {
		if err := core.CheckMemoryMB(*b.MemoryMB); err != nil {
			return errBadRequest("memoryMb %v", err)
		}
		sp.memoryMB = *b.MemoryMB
	}
	if b.Priority != nil {
		if *b.Priority < -maxPriority || *b.Priority > maxPriority {
			return errBadRequest("priority must be -%d..%d", maxPriority, maxPriority)
		}
		sp.priority = int(*b.Priority)
	}
	if b.MaxRetries != nil {
		if *b.MaxRetries < 0 || *b.MaxRetries > maxMaxRetries {
			return errBadRequest("maxRetries must be 0..%d", maxMaxRetries)
		}
		sp.retries = int(*b.MaxRetries)
	}
	if b.TimeoutSeconds != nil {
		if *b.TimeoutSeconds < 0 || *b.TimeoutSeconds > maxTimeoutSeconds {
			return errBadRequest("timeoutSeconds must be 0..%d (0: no limit)", maxTimeoutSeconds)
		}
		sp.timeout = int(*b.TimeoutSeconds)
	}
	if b.Env != nil {
		env := make(map[string]string, len(*b.Env))
		for k, v := range *b.Env {
			if !envKeyRe.MatchString(k) {
				return errBadRequest("env key %q must be an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 128)", clip.String(k, 64))
			}
			if why := core.ReservedEnv(k); why != "" {
				return errBadRequest("env.%s may not be set: %s", k, why)
			}
			if strings.IndexByte(v, 0) >= 0 {
				return errBadRequest("env %q contains a NUL byte", k)
			}
			env[k] = v
		}
		sp.env = env
	}
	if b.Tags != nil {
		if len(*b.Tags) > maxTags {
			return errBadRequest("at most %d tags", maxTags)
		}
		for i, t := range *b.Tags {
			if t == "" || utf8.RuneCountInString(t) > maxTagChars || strings.IndexByte(t, 0) >= 0 {
				return errBadRequest("tags[%d] must be 1..%d characters without NUL", i, maxTagChars)
			}
		}
		sp.tags = append([]string(nil), *b.Tags...)
	}
	if b.Preemptible != nil {
		sp.preemptible = *b.Preemptible
	}
	if b.Private != nil {
		sp.private = *b.Private
	}
	if b.PreemptGraceSeconds != nil {
		if max := int64(core.MaxPreemptGrace.Seconds()); *b.PreemptGraceSeconds < 0 || *b.PreemptGraceSeconds > max {
			return errBadRequest("preemptGraceSeconds must be 0..%d (0: %d)", max, int(core.DefaultPreemptGrace.Seconds()))
		}
		sp.grace = int(*b.PreemptGraceSeconds)
	}
	if b.Workdir != nil {
		if len(*b.Workdir) > maxWorkdirBytes || strings.IndexByte(*b.Workdir, 0) >= 0 {
			return errBadRequest("workdir must be at most %d bytes without NUL", maxWorkdirBytes)
		}
		// A worker has no directory a relative one could be relative to:
		// refused here rather than failing the run at the worker.
		if *b.Workdir != "" && !strings.HasPrefix(*b.Workdir, "/") {
			return errBadRequest("workdir %q must be an absolute path on the worker", clip.String(*b.Workdir, 64))
		}
		sp.workdir = *b.Workdir
	}
	if b.Python != nil {
		if err := b.Python.Check(); err != nil {
			return errBadRequest("%s", err.Error())
		}
		py := *b.Python
		sp.python = &py
	}
	if b.Image != nil {
		if err := core.CheckImage(*b.Image); err != nil {
			return errBadRequest("%s", err.Error())
		}
		sp.image = *b.Image
	}
	if sp.image != "" && sp.python != nil {
		return errBadRequest("image and python cannot be combined: a run in an image uses the image's own Python; install its requirements in the image")
	}
	if b.Code != nil {
		if e := applyCode(sp, b.Code); e != nil {
			return e
		}
		if e := s.checkCodeTree(sp.code.Tree); e != nil {
			return e
		}
	}
	if e := applyDeps(sp, b); e != nil {
		return e
	}
	if b.Kind != nil {
		if *b.Kind != core.KindBatch && *b.Kind != core.KindInteractive {
			return errBadRequest("kind must be %q or %q", core.KindBatch, core.KindInteractive)
		}
		sp.kind = *b.Kind
	}
	if b.Record != nil {
		sp.noRecord = !*b.Record
	}
	if sp.noRecord && sp.kind != core.KindInteractive {
		return errBadRequest("record applies to interactive runs only (kind %q): a batch run's output is always its log", core.KindInteractive)
	}
	if b.Port != nil {
		if *b.Port < 1 || *b.Port > 65535 {
			return errBadRequest("port must be 1..65535: the port the session's web app listens on, on its worker's loopback")
		}
		sp.port = int(*b.Port)
	}
	if sp.port != 0 && sp.kind != core.KindInteractive {
		return errBadRequest("port applies to interactive runs only (kind %q): a batch run's web app is not proxied", core.KindInteractive)
	}
	if len(sp.base) == 0 && sp.kind != core.KindInteractive {
		return errBadRequest("give command (an argv array) or algorithm")
	}
	return nil
}

// regauge sets sp's GPUs to gpus. A rerun whose original got the default
// cores or memory for its GPUs gets the default for its new GPUs instead
// (the Task does not say whether a value was asked for, so a value equal
// to the default counts as the default).
func (s *Server) regauge(sp *spec, gpus int, fraction float64) {
	if gpus != sp.gpus || fraction != sp.gpuFraction {
		was := core.Task{GPUs: sp.gpus, GPUFraction: sp.gpuFraction}
		s.cfg.Resources.Fill(&was)
		if sp.cpus == was.CPUs {
			sp.cpus = 0
		}
		if sp.memoryMB == was.MemoryMB {
			sp.memoryMB = 0
		}
	}
	sp.gpus, sp.gpuFraction = gpus, fraction
}

// Limits of a submission's code (API.md "Run outputs").
const (
	maxGitCommitBytes   = 64
	maxGitRemoteBytes   = 1024
	maxDiffOmittedChars = 200
)

// applyCode replaces sp's code with c: a new record, with its own diff or
// none (a rerun that sends code does not keep the original's diff).
func applyCode(sp *spec, c *submitCode) *apiError {
	if len(c.GitCommit) > maxGitCommitBytes || strings.IndexByte(c.GitCommit, 0) >= 0 {
		return errBadRequest("code.gitCommit must be at most %d characters", maxGitCommitBytes)
	}
	remote := core.RedactRemote(c.GitRemote)
	if len(remote) > maxGitRemoteBytes || strings.IndexByte(remote, 0) >= 0 {
		return errBadRequest("code.gitRemote must be a URL of at most %d bytes", maxGitRemoteBytes)
	}
	if len(c.Diff) > core.MaxCodeDiffBytes {
		return errBadRequest("code.diff is %d bytes, over the %d MiB limit: send it without the diff and say why in code.diffOmitted",
			len(c.Diff), core.MaxCodeDiffBytes>>20)
	}
	if utf8.RuneCountInString(c.DiffOmitted) > maxDiffOmittedChars || strings.IndexByte(c.DiffOmitted, 0) >= 0 {
		return errBadRequest("code.diffOmitted must be at most %d characters", maxDiffOmittedChars)
	}
	if c.Tree != "" && !artifact.ValidSHA256(c.Tree) {
		return errBadRequest("code.tree must be a tree hash (64 lower-case hex digits), as POST /api/code/trees answers")
	}
	if c.Tree == "" && c.Subdir != "" {
		return errBadRequest("code.subdir needs code.tree")
	}
	if err := codetree.CheckSubdir(c.Subdir); err != nil {
		return errBadRequest("code.subdir: %v", err)
	}
	sp.code = core.CodeInfo{GitCommit: c.GitCommit, GitDirty: c.GitDirty, GitRemote: remote, DiffOmitted: c.DiffOmitted,
		Tree: c.Tree, Subdir: c.Subdir}
	sp.diff = nil
	if c.Diff != "" {
		sp.diff = []byte(c.Diff)
		sp.code.DiffOmitted = ""
	}
	return nil
}

// argv is the run's full command: base, then "--key value" per param.
func (sp *spec) argv() []string {
	out := append([]string(nil), sp.base...)
	if len(sp.params) > 0 {
		args, _, _ := paramArgs(sp.params)
		out = append(out, args...)
	}
	return out
}

// defaultName names a run after its algorithm or its program.
func (sp *spec) defaultName() string {
	if sp.algo != "" {
		return sp.algo
	}
	if len(sp.base) == 0 {
		if sp.kind == core.KindInteractive {
			return "shell"
		}
		return ""
	}
	name := filepath.Base(sp.base[0])
	if len(sp.base) > 1 && !strings.HasPrefix(sp.base[1], "-") {
		name += " " + filepath.Base(sp.base[1])
	}
	if utf8.RuneCountInString(name) > maxNameChars {
		name = string([]rune(name)[:maxNameChars])
	}
	return name
}

// paramArgs turns a JSON object into "--key value" pairs in the object's
// order: strings as they are, anything else as its compact JSON text. It also
// returns the object compacted.
func paramArgs(raw []byte) (args []string, compact []byte, err error) {
	if d := jsonDepth(raw); d > maxParamsDepth {
		return nil, nil, fmt.Errorf("nested %d levels deep; at most %d", d, maxParamsDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("must be a JSON object of name: value")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("malformed JSON object")
		}
		key, _ := tok.(string)
		if !sweep.ValidParamName(key) {
			return nil, nil, fmt.Errorf("name %q must be 1–64 of [A-Za-z0-9_.-], not starting with '-'", clip.String(key, 64))
		}
		if seen[key] {
			return nil, nil, fmt.Errorf("name %q appears twice", key)
		}
		seen[key] = true
		if len(seen) > maxParams {
			return nil, nil, fmt.Errorf("at most %d params", maxParams)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("malformed value of %q", key)
		}
		val := ""
		var str string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &str) == nil {
			val = str
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, v); err != nil {
				return nil, nil, fmt.Errorf("malformed value of %q", key)
			}
			val = buf.String()
		}
		if strings.IndexByte(val, 0) >= 0 {
			return nil, nil, fmt.Errorf("value of %q contains a NUL byte", key)
		}
		args = append(args, "--"+key, val)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("malformed JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("must be one JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, nil, fmt.Errorf("malformed JSON object")
	}
	return args, buf.Bytes(), nil
}

// jsonDepth is the deepest nesting of objects and arrays in a JSON text
// (brackets inside strings do not count); it does not validate the text.
func jsonDepth(raw []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
