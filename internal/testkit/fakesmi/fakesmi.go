// Package fakesmi is the fake nvidia-smi of rlsched's tests: hardware is the
// one part tests may stand in for. Install writes a small python3 script (the
// standard library only) named nvidia-smi into a test's temporary directory;
// it answers `--query-gpu=`, `--query-compute-apps=` (any fields they name, in
// the order named), `-L` and `topo -m` from a JSON state file beside it,
// which the test rewrites through the methods of Fake. Each query can also be made to hang,
// fail, pad its fields or print any other output, for the bad-input tests.
//
// Only tests import it; it must never be reachable from a production binary.
package fakesmi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

//go:embed nvidia-smi.py
var script []byte

// GPU is one row of `--query-gpu`. Its JSON names are nvidia-smi's fields.
type GPU struct {
	Index          int    `json:"index"`
	UUID           string `json:"uuid"`
	Name           string `json:"name"`
	MemoryTotalMB  int    `json:"memory.total"`
	MemoryUsedMB   int    `json:"memory.used"`
	UtilizationPct int    `json:"utilization.gpu"`
	// CPUAffinity is the "CPU Affinity" of `topo -m` ("0-15,32-47"); "" prints N/A.
	CPUAffinity string `json:"cpu_affinity,omitempty"`
	// Raw prints a field as this text instead, e.g.
	// {"utilization.gpu": "[N/A]"} or {"memory.used": "[Not Supported]"}.
	Raw map[string]string `json:"raw,omitempty"`
}

// Proc is one row of `--query-compute-apps`: a process using a GPU.
type Proc struct {
	GPUUUID      string `json:"gpu_uuid"`
	PID          int    `json:"pid"`
	UsedMemoryMB int    `json:"used_memory"`
	// ProcessName defaults to "python".
	ProcessName string            `json:"process_name,omitempty"`
	Raw         map[string]string `json:"raw,omitempty"`
}

// Behaviour makes one query misbehave. The zero value answers normally.
type Behaviour struct {
	// Hang sleeps forever, with a child in the same process group holding
	// stdout; HangPIDs names both.
	Hang bool `json:"hang,omitempty"`
	// Exit, when not 0, exits with this status after printing Stdout and
	// Stderr (real nvidia-smi prints most failures on stdout).
	Exit   int    `json:"exit,omitempty"`
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Output, when not nil, is printed instead of the rows.
	Output *string `json:"output,omitempty"`
	// Spaces pads every field with this many extra spaces on each side.
	Spaces int `json:"spaces,omitempty"`
	// CRLF ends lines with "\r\n".
	CRLF bool `json:"crlf,omitempty"`
}

// State is everything the fake answers from.
type State struct {
	GPUs  []GPU  `json:"gpus"`
	Procs []Proc `json:"procs"`
	// Behaviour of `--query-gpu` ("gpu"), `--query-compute-apps` ("apps"),
	// `-L` ("list") and `topo -m` ("topo").
	Behaviour map[string]Behaviour `json:"behaviour,omitempty"`
}

// Query names for State.Behaviour.
const (
	QueryGPU  = "gpu"
	QueryApps = "apps"
	QueryList = "list"
	QueryTopo = "topo"
)

// Fake is an installed fake nvidia-smi. Its methods may be called from any
// goroutine; each rewrites the whole state file atomically, so nvidia-smi
// never reads half a state.
type Fake struct {
	// Dir holds the script (put it first on PATH) and its state.
	Dir string
	// Bin is the script's path: the value for NVIDIA_SMI.
	Bin string

	t     testing.TB
	mu    sync.Mutex
	state State
}

var (
	pythonOnce sync.Once
	python     string
	pythonErr  error
)

// interpreter is the path of the real python3 binary (not a pyenv-style shim
// that needs the caller's environment), so the script runs whatever PATH the
// code under test gives it.
func interpreter() (string, error) {
	pythonOnce.Do(func() {
		p, err := exec.LookPath("python3")
		if err != nil {
			pythonErr = fmt.Errorf("cannot find python3 on PATH for the fake nvidia-smi: %w", err)
			return
		}
		out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
		if err != nil {
			pythonErr = fmt.Errorf("cannot ask %s for its interpreter: %w", p, err)
			return
		}
		python = strings.TrimSpace(string(out))
	})
	return python, pythonErr
}

// Install writes the fake into a new directory of t.TempDir() with no GPUs
// and no processes. python3 must be on PATH; without it the test fails.
func Install(t testing.TB) *Fake {
	t.Helper()
	py, err := interpreter()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "fakesmi")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// -I: isolated from the caller's PYTHON* variables and user site; -S:
	// no site import, which halves start-up time.
	body := append([]byte("#!"+py+" -IS\n"), script...)
	bin := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(bin, body, 0o755); err != nil {
		t.Fatal(err)
	}
	f := &Fake{Dir: dir, Bin: bin, t: t}
	f.Update(func(*State) {})
	return f
}

// PATH is $PATH with the fake's directory first.
func (f *Fake) PATH() string {
	return f.Dir + string(os.PathListSeparator) + os.Getenv("PATH")
}

// Env is the environment entries that make a worker use the fake.
func (f *Fake) Env() []string {
	return []string{"PATH=" + f.PATH(), "NVIDIA_SMI=" + f.Bin}
}

// Update changes the state under the fake's lock and writes it.
func (f *Fake) Update(change func(*State)) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.state)
	b, err := json.MarshalIndent(f.state, "", "  ")
	if err != nil {
		f.t.Fatalf("fakesmi: cannot encode state: %v", err)
	}
	tmp := filepath.Join(f.Dir, "nvidia-smi.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		f.t.Fatalf("fakesmi: cannot write state: %v", err)
	}
	if err := os.Rename(tmp, filepath.Join(f.Dir, "nvidia-smi.json")); err != nil {
		f.t.Fatalf("fakesmi: cannot replace state: %v", err)
	}
}

// State returns a copy of the current state.
func (f *Fake) State() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s State
	b, _ := json.Marshal(f.state)
	_ = json.Unmarshal(b, &s)
	return s
}

// SetGPUs replaces the GPUs.
func (f *Fake) SetGPUs(gpus ...GPU) {
	f.t.Helper()
	f.Update(func(s *State) { s.GPUs = gpus })
}

// SetProcs replaces the compute processes.
func (f *Fake) SetProcs(procs ...Proc) {
	f.t.Helper()
	f.Update(func(s *State) { s.Procs = procs })
}

// SetProcMemory makes process pid report mb MiB used on the GPU with
// uuid, adding the process when it is not listed; a negative mb removes
// it. A test makes a run's process use GPU memory with it (the run's pid is
// TaskStarted.pid).
func (f *Fake) SetProcMemory(uuid string, pid, mb int) {
	f.t.Helper()
	f.Update(func(s *State) {
		for i, p := range s.Procs {
			if p.GPUUUID == uuid && p.PID == pid {
				if mb < 0 {
					s.Procs = append(s.Procs[:i], s.Procs[i+1:]...)
				} else {
					s.Procs[i].UsedMemoryMB = mb
				}
				return
			}
		}
		if mb >= 0 {
			s.Procs = append(s.Procs, Proc{GPUUUID: uuid, PID: pid, UsedMemoryMB: mb})
		}
	})
}

// SetUtil sets GPU index's utilisation in percent.
func (f *Fake) SetUtil(index, pct int) {
	f.t.Helper()
	f.Update(func(s *State) { f.gpuLocked(s, index).UtilizationPct = pct })
}

// SetMemoryUsed sets GPU index's memory used in MiB.
func (f *Fake) SetMemoryUsed(index, mb int) {
	f.t.Helper()
	f.Update(func(s *State) { f.gpuLocked(s, index).MemoryUsedMB = mb })
}

// SetBehaviour sets how query (QueryGPU, QueryApps, QueryList) answers.
func (f *Fake) SetBehaviour(query string, b Behaviour) {
	f.t.Helper()
	f.Update(func(s *State) {
		if s.Behaviour == nil {
			s.Behaviour = map[string]Behaviour{}
		}
		s.Behaviour[query] = b
	})
}

func (f *Fake) gpuLocked(s *State, index int) *GPU {
	for i := range s.GPUs {
		if s.GPUs[i].Index == index {
			return &s.GPUs[i]
		}
	}
	f.t.Fatalf("fakesmi: no GPU %d", index)
	return nil
}

// HangPIDs returns the pids of the last hanging call (its leader and the
// child holding its stdout), or nil when none has hung yet.
func (f *Fake) HangPIDs() []int {
	b, err := os.ReadFile(filepath.Join(f.Dir, "hang.pids"))
	if err != nil {
		return nil
	}
	var pids []int
	for _, w := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(w); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// GPUs returns n idle GPUs named name, indices 0..n-1, with UUIDs UUID(i)
// and 40960 MiB each.
func GPUs(n int, name string) []GPU {
	gpus := make([]GPU, n)
	for i := range gpus {
		gpus[i] = GPU{Index: i, UUID: UUID(i), Name: name, MemoryTotalMB: 40960}
	}
	return gpus
}

// UUID is the UUID GPUs gives GPU i.
func UUID(i int) string {
	return fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", 0xfa4e0000+i, i)
}
