package worker

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/worker/isolation"
)

// A run's Python environment (issue 27; API.md "Python environments"): an
// existing venv it names, or one the worker builds from a requirements file
// of its working directory and keeps in DataDir/envs/<key>, where key
// hashes what decides the venv's contents: the requirements file, the
// interpreter, the worker's pip settings and the run's owner.
//
// Each env dir has two lock files beside it: <key>.build, held exclusively
// while it is built (so workers sharing the dir build it once), and
// <key>.use, held shared by every run using it (so no clean-up removes an
// env a run is using, in this process or another). Runs of this worker
// that want an env at once wait for the one build (flights) and each get
// its output in their log.

const (
	// envReady marks a complete env; it holds the env's size in bytes,
	// and its mtime is the env's last use (LRU).
	envReady = ".rlsched-ready"
	// envTailLines: a failed build's last lines in the run's error.
	envTailLines = 12
	// envReplayMax bounds the output a run that joins a build late is
	// given of what it missed.
	envReplayMax = 256 << 10
	// ReasonEnvBuild is TaskFinished.reason of a run whose env could not
	// be built.
	ReasonEnvBuild = "env_build"
	// defaultEnvCacheMB holds a few dozen torch-sized envs.
	defaultEnvCacheMB = 20480
)

// envError fails a run whose Python environment could not be made; reason
// is TaskFinished.reason.
type envError struct {
	reason string
	err    error
}

func (e *envError) Error() string { return e.err.Error() }
func (e *envError) Unwrap() error { return e.err }

// pyEnv is what a run's Python environment adds to its start.
type pyEnv struct {
	dir string // the venv: VIRTUAL_ENV, its bin first on PATH
	// Set when the worker builds it from a requirements file: rel as the
	// run named it and owner at prepare; the rest by resolve, at start.
	rel, owner                string
	key, requirements, python string
}

// envs is the worker's cache of built venvs.
type envs struct {
	dir   string // DataDir/envs
	maxMB int64  // <= 0: no cap
	log   zerolog.Logger

	mu      sync.Mutex
	flights map[string]*envFlight
}

// envFlight is one build in progress; runs that want its env meanwhile
// join it.
type envFlight struct {
	done chan struct{}
	err  error // set before done is closed

	mu     sync.Mutex
	out    bytes.Buffer // its output so far, up to envReplayMax
	sinks  []io.Writer
	cutOff bool
}

func (f *envFlight) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out.Len()+len(p) <= envReplayMax {
		f.out.Write(p)
	} else {
		f.cutOff = true
	}
	for _, w := range f.sinks {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// join adds w to the flight's output, after what it missed.
func (f *envFlight) join(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, _ = w.Write(f.out.Bytes())
	if f.cutOff {
		_, _ = io.WriteString(w, "[env] ... (earlier output left out)\n")
	}
	f.sinks = append(f.sinks, w)
}

func (f *envFlight) leave(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sinks = slices.DeleteFunc(f.sinks, func(x io.Writer) bool { return x == w })
}

func newEnvs(dataDir string, maxMB int64, log zerolog.Logger) (*envs, error) {
	e := &envs{dir: filepath.Join(dataDir, "envs"), maxMB: maxMB, log: log, flights: map[string]*envFlight{}}
	// 0711: runs reach their env by its path, and list none.
	if err := os.MkdirAll(e.dir, 0o711); err != nil {
		return nil, fmt.Errorf("cannot create the env cache %s: %w", e.dir, err)
	}
	if err := os.Chmod(e.dir, 0o711); err != nil {
		return nil, err
	}
	return e, nil
}

// pipSettings are the worker's own PIP_* variables (its index, find-links,
// extra index, trust and proxy settings), sorted: a build never reads the
// run's env for them, and they are part of an env's key.
func pipSettings() []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PIP_") && k != "PIP_CACHE_DIR" {
			out = append(out, kv)
		}
	}
	slices.Sort(out)
	return out
}

// pythonEnv checks the Python environment m names, before the run's
// command is looked up: a venv's bin/python must be one the run's uid can
// execute; a requirements file is read at start (resolveEnv). nil when m
// names none.
func (a *agent) pythonEnv(m *pb.ExecuteTask, r *run, dir string, env []string) (*pyEnv, error) {
	spec := &core.PythonEnv{Requirements: m.GetPythonRequirements(), Venv: m.GetPythonVenv()}
	if *spec == (core.PythonEnv{}) {
		return nil, nil
	}
	if err := spec.Check(); err != nil {
		return nil, err
	}
	if v := spec.Venv; v != "" {
		py := filepath.Join(v, "bin", "python")
		if _, err := os.Stat(py); err != nil {
			return nil, fmt.Errorf("python.venv %s has no bin/python (%v): make it with python3 -m venv %s on this worker, or name another", v, err, v)
		}
		if _, err := isolation.LookPath(py, "", dir, r.ident); err != nil {
			return nil, fmt.Errorf("python.venv %s: %w", v, err)
		}
		return &pyEnv{dir: filepath.Clean(v)}, nil
	}
	if a.envs == nil {
		return nil, errors.New("this worker keeps no Python environments (ENV_CACHE_MB=-1): give python.venv, or run on another worker")
	}
	return &pyEnv{rel: spec.Requirements, owner: m.GetUser()}, nil
}

// resolveEnv reads the requirements file in the run's working directory as
// it is when the run starts (after its code is in place), and sets the
// env's key, dir and interpreter.
func (a *agent) resolveEnv(r *run, p *pyEnv, dir string, env []string) error {
	reqPath := filepath.Join(dir, filepath.FromSlash(p.rel))
	if err := isolation.CheckRead(r.ident, reqPath); err != nil {
		return fmt.Errorf("python.requirements %s: %w", p.rel, err)
	}
	content, err := os.ReadFile(reqPath)
	if err != nil {
		return fmt.Errorf("python.requirements %s: %w", p.rel, err)
	}
	// The interpreter the venv is made with: python3 as the run would get
	// it (RUN_PYTHON where its own cannot be run), resolved to the file,
	// whose size and time stand for its version.
	python, err := a.lookPath(r, "python3", envValue(env, "PATH"), dir)
	if err != nil {
		return fmt.Errorf("python.requirements: no python3 to build the env with: %w", err)
	}
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return fmt.Errorf("python.requirements: %w", err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return err
	}
	h := sha256.New()
	fmt.Fprintf(h, "rlsched-venv 1\x00%s\x00%s\x00%d\x00%d\x00", p.owner, real, st.Size(), st.ModTime().UnixNano())
	for _, kv := range pipSettings() {
		fmt.Fprintf(h, "%s\x00", kv)
	}
	h.Write(content)
	p.key = hex.EncodeToString(h.Sum(nil))[:32]
	p.dir, p.requirements, p.python = filepath.Join(a.envs.dir, p.key), reqPath, python
	return nil
}

// toBuild: p is an env the worker builds (from a requirements file).
func (p *pyEnv) toBuild() bool { return p != nil && p.rel != "" }

// apply puts the env's bin first on the run's PATH and sets VIRTUAL_ENV
// (after the task's env: exec keeps a name's last value).
func (p *pyEnv) apply(env []string) []string {
	path := filepath.Join(p.dir, "bin")
	if old := envValue(env, "PATH"); old != "" {
		path += string(os.PathListSeparator) + old
	}
	return append(env, "PATH="+path, "VIRTUAL_ENV="+p.dir)
}

// build makes sure r's env exists, building it (once, whoever else wants
// it), and holds it for r until release; the build's output goes into r's
// log, each line prefixed "[env] ".
func (e *envs) build(r *run, p *pyEnv, cacheEnv []string, privDir string) (release func(), err error) {
	out := &prefixWriter{w: r.out, prefix: "[env] "}
	defer out.flush()
	for {
		e.mu.Lock()
		f := e.flights[p.key]
		if f == nil {
			f = &envFlight{done: make(chan struct{})}
			e.flights[p.key] = f
			e.mu.Unlock()
			f.join(out)
			f.err = e.buildLocked(r, p, f, cacheEnv, privDir)
			e.mu.Lock()
			delete(e.flights, p.key)
			e.mu.Unlock()
			close(f.done)
			f.leave(out)
			if f.err != nil {
				return nil, f.err
			}
		} else {
			e.mu.Unlock()
			runNote(r, fmt.Sprintf("python env %s: another run is building it; waiting", p.key[:12]))
			f.join(out)
			<-f.done
			f.leave(out)
			if f.err != nil {
				return nil, f.err
			}
		}
		// Held for the run: no clean-up removes it meanwhile. Another
		// worker may have removed it between the build and here: again.
		release, ok, err := e.use(p.key)
		if err != nil {
			return nil, err
		}
		if ok {
			runNote(r, fmt.Sprintf("python env %s (%s)", p.key[:12], p.dir))
			return release, nil
		}
	}
}

// use takes r's shared hold of a ready env and marks its use; ok is false
// when it is not ready (removed meanwhile).
func (e *envs) use(key string) (release func(), ok bool, err error) {
	lf, err := flockFile(filepath.Join(e.dir, key+".use"), syscall.LOCK_SH)
	if err != nil {
		return nil, false, err
	}
	marker := filepath.Join(e.dir, key, envReady)
	if _, err := os.Stat(marker); err != nil {
		lf.Close()
		return nil, false, nil
	}
	now := time.Now()
	_ = os.Chtimes(marker, now, now)
	return func() { lf.Close() }, true, nil
}

// buildLocked builds the env under its build lock, unless it is ready.
func (e *envs) buildLocked(r *run, p *pyEnv, out io.Writer, cacheEnv []string, privDir string) error {
	lf, err := flockFile(filepath.Join(e.dir, p.key+".build"), syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer lf.Close()
	if _, err := os.Stat(filepath.Join(p.dir, envReady)); err == nil {
		fmt.Fprintf(out, "python env %s is built already\n", p.key[:12])
		return nil
	}
	begin := time.Now()
	fmt.Fprintf(out, "building python env %s from %s with %s\n", p.key[:12], filepath.Base(p.requirements), p.python)
	if err := e.makeEnv(r, p, out, cacheEnv, privDir); err != nil {
		_ = os.RemoveAll(p.dir) // never a partial env
		return err
	}
	size, err := lockDown(p.dir)
	if err != nil {
		_ = os.RemoveAll(p.dir)
		return fmt.Errorf("python env %s: %w", p.key[:12], err)
	}
	if err := os.WriteFile(filepath.Join(p.dir, envReady), []byte(strconv.FormatInt(size, 10)), 0o644); err != nil {
		_ = os.RemoveAll(p.dir)
		return err
	}
	fmt.Fprintf(out, "built python env %s in %.1f s, %d MiB\n", p.key[:12], time.Since(begin).Seconds(), size>>20)
	e.evict(p.key)
	return nil
}

// makeEnv runs python3 -m venv and pip install -r as the run's uid (a
// requirements file may name an sdist, whose build runs its code: never as
// the worker's root), into a fresh dir it owns while it builds.
func (e *envs) makeEnv(r *run, p *pyEnv, out io.Writer, cacheEnv []string, privDir string) error {
	if err := os.RemoveAll(p.dir); err != nil {
		return err
	}
	if err := os.Mkdir(p.dir, 0o755); err != nil {
		return err
	}
	if r.ident != nil {
		if err := os.Chown(p.dir, int(r.ident.UID()), int(r.ident.GID())); err != nil {
			return err
		}
	}
	// The build's environment: the worker's pip settings and the run's
	// identity and caches, never the run's own env.
	env := append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "PIP_NO_INPUT=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PYTHONDONTWRITEBYTECODE=1"}, pipSettings()...)
	env = append(env, isolation.IdentityEnv(r.ident, privDir)...)
	env = append(env, cacheEnv...)
	tail := &tailLines{n: envTailLines}
	w := io.MultiWriter(out, tail)
	steps := []struct {
		what string
		argv []string
	}{
		{"python3 -m venv", []string{p.python, "-m", "venv", p.dir}},
		{"pip install", []string{filepath.Join(p.dir, "bin", "python"), "-m", "pip", "install", "-r", p.requirements}},
	}
	for _, step := range steps {
		argv := step.argv
		fmt.Fprintf(out, "$ %s\n", strings.Join(argv, " "))
		cmd := &exec.Cmd{Path: argv[0], Args: argv, Dir: filepath.Dir(p.requirements), Env: env, Stdout: w, Stderr: w,
			SysProcAttr: isolation.ProcAttr(r.ident.Credential())}
		err := cmd.Run()
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left in its group
		}
		if err != nil {
			return &envError{reason: ReasonEnvBuild, err: fmt.Errorf("cannot build the run's python env from %s: %s failed (%v):\n%s",
				filepath.Base(p.requirements), step.what, err, strings.TrimSpace(tail.String()))}
		}
	}
	return nil
}

// lockDown makes the built env the worker's, readable and executable by
// every run, writable by none (the uid that built it may be another run's
// next), and returns its size.
func lockDown(dir string) (int64, error) {
	uid, gid := os.Geteuid(), os.Getegid()
	var size int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, uid, gid); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size += info.Size()
		return os.Chmod(path, info.Mode().Perm()&^0o022)
	})
	return size, err
}

// evict removes the least recently used envs not in use until the cache
// is within maxMB; keep (just built) stays.
func (e *envs) evict(keep string) {
	if e.maxMB <= 0 {
		return
	}
	type entry struct {
		key  string
		size int64
		used time.Time
	}
	var all []entry
	var total int64
	ents, _ := os.ReadDir(e.dir)
	for _, d := range ents {
		if !d.IsDir() {
			continue
		}
		marker := filepath.Join(e.dir, d.Name(), envReady)
		b, err := os.ReadFile(marker)
		st, serr := os.Stat(marker)
		if err != nil || serr != nil {
			continue // being built, or a failed build's (it removes itself)
		}
		size, _ := strconv.ParseInt(string(b), 10, 64)
		all = append(all, entry{d.Name(), size, st.ModTime()})
		total += size
	}
	slices.SortFunc(all, func(a, b entry) int { return a.used.Compare(b.used) })
	for _, en := range all {
		if total <= e.maxMB<<20 {
			return
		}
		if en.key == keep {
			continue
		}
		if e.remove(en.key) {
			total -= en.size
			e.log.Info().Str("env", en.key).Int64("bytes", en.size).Msg("removed a python env, the least recently used, past ENV_CACHE_MB")
		}
	}
}

// remove deletes an env no one builds or uses, in any process.
func (e *envs) remove(key string) bool {
	b, err := tryFlockFile(filepath.Join(e.dir, key+".build"))
	if err != nil || b == nil {
		return false
	}
	defer b.Close()
	u, err := tryFlockFile(filepath.Join(e.dir, key+".use"))
	if err != nil || u == nil {
		return false
	}
	defer u.Close()
	// The marker first: a half-removed env is never taken for a ready one.
	if err := os.Remove(filepath.Join(e.dir, key, envReady)); err != nil {
		return false
	}
	return os.RemoveAll(filepath.Join(e.dir, key)) == nil
}

// flockFile opens path (creating it) and flocks it with how (LOCK_SH,
// LOCK_EX), waiting; closing the file unlocks it.
func flockFile(path string, how int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot lock %s: %w", path, err)
	}
	return f, nil
}

// tryFlockFile is flockFile(LOCK_EX) without waiting: nil, nil when held.
func tryFlockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, err
	}
	return f, nil
}

// prefixWriter writes whole lines to w, each with prefix; flush writes a
// last partial one.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	part   []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.part = append(p.part, b...)
			break
		}
		line := append(append([]byte(p.prefix), p.part...), b[:i+1]...)
		p.part = p.part[:0]
		if _, err := p.w.Write(line); err != nil {
			return n, err
		}
		b = b[i+1:]
	}
	return n, nil
}

func (p *prefixWriter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.part) > 0 {
		_, _ = p.w.Write(append(append([]byte(p.prefix), p.part...), '\n'))
		p.part = nil
	}
}

// tailLines keeps the last n lines written to it.
type tailLines struct {
	mu    sync.Mutex
	n     int
	lines []string
	part  string
}

func (t *tailLines) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(append([]byte(t.part), b...)))
	t.part = ""
	complete := len(b) > 0 && b[len(b)-1] == '\n'
	var got []string
	for sc.Scan() {
		got = append(got, sc.Text())
	}
	if !complete && len(got) > 0 {
		t.part, got = got[len(got)-1], got[:len(got)-1]
	}
	t.lines = append(t.lines, got...)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
	return len(b), nil
}

func (t *tailLines) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := t.lines
	if t.part != "" {
		lines = append(slices.Clone(lines), t.part)
	}
	return strings.Join(lines, "\n")
}
