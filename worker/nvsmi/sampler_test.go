package nvsmi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
)

// problemLog records what a Sampler reports through OnProblem.
type problemLog struct {
	mu   sync.Mutex
	list []string
}

func (p *problemLog) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, s)
}

func (p *problemLog) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.list...)
}

// runsVar is a Config.Runs the test changes between samples.
type runsVar struct {
	mu   sync.Mutex
	runs []RunGroup
}

func (r *runsVar) set(runs ...RunGroup) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = runs
}

func (r *runsVar) get() []RunGroup {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs
}

func newSampler(t *testing.T, fake *fakesmi.Fake, cfg Config) (*Sampler, *problemLog) {
	t.Helper()
	probs := &problemLog{}
	cfg.Bin = fake.Bin
	cfg.OnProblem = probs.add
	return NewSampler(cfg), probs
}

func sample(t *testing.T, s *Sampler) *Sample {
	t.Helper()
	smp := s.SampleOnce(context.Background())
	if smp == nil {
		t.Fatal("no sample")
	}
	return smp
}

func TestSamplerRun(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "NVIDIA A100-SXM4-40GB")...)
	s, probs := newSampler(t, fake, Config{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor(t, "a first sample", func() bool { return s.Latest() != nil })
	first := s.Latest()
	if len(first.GPUs) != 2 || first.GPUs[1].UUID != fakesmi.UUID(1) || first.GPUs[1].UtilizationPct != 0 ||
		first.GPUs[1].MemoryTotalMB != 40960 || first.Problem != "" {
		t.Fatalf("first sample %+v", first)
	}
	fake.SetUtil(1, 93)
	fake.SetMemoryUsed(1, 30000)
	waitFor(t, "the sampler to see GPU 1 busy", func() bool {
		g := s.Latest().GPUs[1]
		return g.UtilizationPct == 93 && g.MemoryUsedMB == 30000
	})
	if s.Latest().Seq <= first.Seq {
		t.Fatalf("seq %d after %d", s.Latest().Seq, first.Seq)
	}
	if p := probs.get(); len(p) != 0 {
		t.Fatalf("problems %q on a healthy nvidia-smi", p)
	}
}

// TestSamplerProblemsOnce: a missing, failing, hung or garbled nvidia-smi is
// reported once when it starts and once when it ends, never per sample.
func TestSamplerProblemsOnce(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "Tesla T4")...)
	// The default timeout: a shorter one could time out a healthy fake on
	// a loaded machine.
	s, probs := newSampler(t, fake, Config{GPUs: []int{0, 1}})

	expect := func(what string, want ...string) {
		t.Helper()
		got := probs.get()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: problems reported %q, want %q", what, got, want)
		}
	}
	sample(t, s)
	sample(t, s)
	expect("healthy")

	// Missing binary.
	if err := os.Rename(fake.Bin, fake.Bin+".away"); err != nil {
		t.Fatal(err)
	}
	notFound := "nvidia-smi not found (" + fake.Bin + "): install the NVIDIA driver, or set NVIDIA_SMI to its path"
	for range 3 {
		smp := sample(t, s)
		if smp.Problem != notFound || len(smp.GPUs) != 2 || smp.GPUs[0].UtilizationPct != Unknown {
			t.Fatalf("without nvidia-smi: %+v", smp)
		}
	}
	expect("missing", notFound)
	if err := os.Rename(fake.Bin+".away", fake.Bin); err != nil {
		t.Fatal(err)
	}
	sample(t, s)
	expect("back", notFound, "")

	// Hung: timed out, the sample still comes.
	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{Hang: true})
	smp := sample(t, s)
	if smp.Problem != "nvidia-smi --query-gpu timed out after 5s" {
		t.Fatalf("hung: %+v", smp)
	}
	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{})

	// Garbled and missing rows, padded fields: the rows it can read are kept.
	short := "0, " + fakesmi.UUID(0) + ", Tesla T4, 15360, 100, 7\n1, " + fakesmi.UUID(1) + "\n"
	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{Output: &short, CRLF: true})
	for range 2 {
		smp = sample(t, s)
	}
	want := "nvidia-smi --query-gpu row 2: 2 fields, want 6; GPU 1 is missing from nvidia-smi's answer"
	if smp.Problem != want || smp.GPUs[0].UtilizationPct != 7 || smp.GPUs[1].UtilizationPct != Unknown {
		t.Fatalf("short rows: %+v", smp)
	}
	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{Spaces: 3})
	sample(t, s)
	expect("recovered", notFound, "", "nvidia-smi --query-gpu timed out after 5s", want, "")
}

// TestSamplerAppsFailureKeepsForeign: when only the process query fails, the
// last foreign processes stay, so the planner keeps new runs off their GPU.
func TestSamplerAppsFailureKeepsForeign(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "Tesla T4")...)
	other := startGroup(t, "sleep", "300")
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(1), PID: other.Process.Pid, UsedMemoryMB: 500})
	s, _ := newSampler(t, fake, Config{})
	if smp := sample(t, s); len(smp.GPUs[1].Foreign) != 1 {
		t.Fatalf("foreign not seen: %+v", smp)
	}
	fake.SetBehaviour(fakesmi.QueryApps, fakesmi.Behaviour{Exit: 6, Stderr: "No devices were found\n"})
	smp := sample(t, s)
	if smp.Problem != "nvidia-smi --query-compute-apps failed (exit status 6): No devices were found" ||
		len(smp.GPUs[1].Foreign) != 1 || smp.GPUs[1].Foreign[0].PID != other.Process.Pid {
		t.Fatalf("after the process query failed: %+v", smp)
	}
}

func currentUser(t *testing.T) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

// TestForeignRealProcesses starts real processes and lists their pids as
// compute apps: one in a run's group is the run's; outside every group it is
// foreign, with its owner and command line.
func TestForeignRealProcesses(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "NVIDIA A100-SXM4-40GB")...)
	runCmd := startGroup(t, "sleep", "300")
	pgid := runCmd.Process.Pid
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: pgid, UsedMemoryMB: 1200})
	runs := &runsVar{}
	s, _ := newSampler(t, fake, Config{Runs: runs.get})

	runs.set(RunGroup{PGID: pgid, GPUs: []int{0}})
	smp := sample(t, s)
	if len(smp.GPUs[0].Foreign) != 0 || !reflect.DeepEqual(smp.Runs, []RunUse{{PGID: pgid, GPUs: []int{0}, MemoryMB: 1200}}) {
		t.Fatalf("a run's process: %+v", smp)
	}
	// The run ends but its process lingers one more sample: still its.
	runs.set()
	if smp = sample(t, s); len(smp.GPUs[0].Foreign) != 0 || len(smp.Runs) != 1 {
		t.Fatalf("the sample after the run ended: %+v", smp)
	}
	// Then it is nobody's.
	smp = sample(t, s)
	want := []Process{{PID: pgid, User: currentUser(t), Command: "sleep 300", MemoryMB: 1200}}
	if !reflect.DeepEqual(smp.GPUs[0].Foreign, want) || len(smp.Runs) != 0 || smp.Problem != "" {
		t.Fatalf("a process outside every run: %+v", smp)
	}
}

// TestForeignChildLeftGroup: a run's child that left the run's process group
// (setsid) is still the run's, through its parent.
func TestForeignChildLeftGroup(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "Tesla T4")...)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `"$0" -c 'import os, time; os.setsid(); print(os.getpid(), flush=True); time.sleep(300)' & wait`, py)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startCmd(t, cmd)
	var child int
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	if child, err = strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err != nil {
		t.Fatalf("child pid %q: %v", buf[:n], err)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	if pg, _ := syscall.Getpgid(child); pg == cmd.Process.Pid {
		t.Fatal("the child did not leave the group")
	}
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: child, UsedMemoryMB: 10})
	s, _ := newSampler(t, fake, Config{Runs: func() []RunGroup { return []RunGroup{{PGID: cmd.Process.Pid, GPUs: []int{0}}} }})
	smp := sample(t, s)
	if len(smp.GPUs[0].Foreign) != 0 || len(smp.Runs) != 1 || smp.Runs[0].PGID != cmd.Process.Pid {
		t.Fatalf("a setsid child of a run: %+v", smp)
	}
}

// TestForeignOddCommand: a command whose name holds spaces and parentheses
// (the comm field of /proc/PID/stat, which must not shift the pgrp field)
// and whose argv holds control characters and more than 200 bytes.
func TestForeignOddCommand(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "Tesla T4")...)
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(t.TempDir(), "a) (b 1 2")
	if err := os.Symlink(strings.TrimSpace(string(out)), odd); err != nil {
		t.Fatal(err)
	}
	code := "import time; time.sleep(300)"
	proc := startCmd(t, &exec.Cmd{Path: odd, Args: []string{odd, "-c", code, "\x1b[31m\t" + strings.Repeat("x", 300)}})
	pid := proc.Process.Pid
	waitFor(t, "the odd command to start", func() bool {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		return strings.Contains(string(b), code)
	})
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: pid, UsedMemoryMB: 1})
	runs := &runsVar{}
	runs.set(RunGroup{PGID: pid, GPUs: []int{0}})
	s, _ := newSampler(t, fake, Config{Runs: runs.get})
	if smp := sample(t, s); len(smp.Runs) != 1 || len(smp.GPUs[0].Foreign) != 0 {
		t.Fatalf("a run whose comm is %q: %+v", "a) (b 1 2", smp)
	}
	runs.set()
	sample(t, s) // the one sample of grace
	smp := sample(t, s)
	if len(smp.GPUs[0].Foreign) != 1 {
		t.Fatalf("foreign: %+v", smp)
	}
	cmd := smp.GPUs[0].Foreign[0].Command
	want := odd + " -c " + code + " [31m" + strings.Repeat("x", 300)
	if cmd != want[:200] {
		t.Fatalf("command %q, want %q", cmd, want[:200])
	}
}

// TestForeignGoneOrHidden: a pid that is not in /proc is never foreign at
// once (it may have exited after nvidia-smi answered); listed again in the
// next sample it lives in another pid namespace, and counts as foreign only
// on a GPU no run holds. A zombie is no one's.
func TestForeignGoneOrHidden(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "Tesla T4")...)
	// A pid above pid_max is in no /proc: as a pid that exited, without the
	// chance of the kernel reusing it while the test runs.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	gone := pidMax + 1
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = zombie.Wait() })
	waitFor(t, "a zombie", func() bool { return isZombie(zombie.Process.Pid) })
	runCmd := startGroup(t, "sleep", "300")
	fake.SetProcs(
		fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: gone, UsedMemoryMB: 100},
		fakesmi.Proc{GPUUUID: fakesmi.UUID(1), PID: gone, UsedMemoryMB: 200},
		fakesmi.Proc{GPUUUID: fakesmi.UUID(1), PID: zombie.Process.Pid, UsedMemoryMB: 1},
	)
	s, _ := newSampler(t, fake, Config{Runs: func() []RunGroup { return []RunGroup{{PGID: runCmd.Process.Pid, GPUs: []int{0}}} }})
	smp := sample(t, s)
	if len(smp.GPUs[0].Foreign)+len(smp.GPUs[1].Foreign) != 0 || smp.Problem != "" {
		t.Fatalf("first sight of a vanished pid and a zombie: %+v", smp)
	}
	smp = sample(t, s)
	want := []Process{{PID: gone, MemoryMB: 200, Unresolved: true}}
	if len(smp.GPUs[0].Foreign) != 0 || !reflect.DeepEqual(smp.GPUs[1].Foreign, want) ||
		!strings.Contains(smp.Problem, "cannot find in /proc") {
		t.Fatalf("a pid hidden for two samples: %+v", smp)
	}
	fake.SetProcs()
	if smp = sample(t, s); len(smp.GPUs[1].Foreign) != 0 || smp.Problem != "" {
		t.Fatalf("after it left: %+v", smp)
	}
}

// TestForeignUserWithoutName: a process of a uid with no user name is
// reported by the number. Needs root to start one.
func TestForeignUserWithoutName(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a process under another uid (CI runs as root)")
	}
	const uid = 54321
	if _, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		t.Skipf("uid %d has a name here", uid)
	}
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "Tesla T4")...)
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	startCmd(t, cmd)
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: cmd.Process.Pid, UsedMemoryMB: 7})
	s, _ := newSampler(t, fake, Config{})
	smp := sample(t, s)
	want := []Process{{PID: cmd.Process.Pid, User: "54321", Command: "sleep 300", MemoryMB: 7}}
	if !reflect.DeepEqual(smp.GPUs[0].Foreign, want) {
		t.Fatalf("foreign %+v, want %+v", smp.GPUs[0].Foreign, want)
	}
}

func TestSameForeign(t *testing.T) {
	mk := func(foreign ...[]Process) *Sample {
		s := &Sample{}
		for i, f := range foreign {
			s.GPUs = append(s.GPUs, GPUState{GPU: GPU{Index: i, UtilizationPct: i}, Foreign: f})
		}
		return s
	}
	bob := Process{PID: 1, User: "bob", Command: "python", MemoryMB: 5}
	f := func(a, b *Sample, want bool) {
		t.Helper()
		if a.SameForeign(b) != want || b.SameForeign(a) != want {
			t.Fatalf("SameForeign(%+v, %+v) != %v", a, b, want)
		}
	}
	f(nil, nil, true)
	f(nil, mk(nil, nil), true)
	f(mk(nil), mk(nil, nil, nil), true) // utilisation and GPU count do not matter
	f(mk(nil, []Process{bob}), mk(nil, []Process{bob}), true)
	f(nil, mk([]Process{bob}), false)
	f(mk([]Process{bob}, nil), mk(nil, []Process{bob}), false)
	bigger := bob
	bigger.MemoryMB = 6
	f(mk([]Process{bob}), mk([]Process{bigger}), false)
}

// TestHelpersAreNotForeign: an MPS server (a child of the worker's MPS
// control daemon, Config.Helpers) is neither foreign nor a run's; the
// Apps flag says the process query answered.
func TestHelpersAreNotForeign(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "NVIDIA A10")...)
	daemon := startCmd(t, exec.Command("sh", "-c", "sleep 300 & wait"))
	var server int
	waitFor(t, "the daemon's child", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", daemon.Process.Pid, daemon.Process.Pid))
		server, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return server > 0
	})
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(0), PID: server, UsedMemoryMB: 300})
	helpers := []int{daemon.Process.Pid}
	s, _ := newSampler(t, fake, Config{Helpers: func() []int { return helpers }})
	if smp := sample(t, s); len(smp.GPUs[0].Foreign) != 0 || len(smp.Runs) != 0 || !smp.Apps {
		t.Fatalf("an MPS server: %+v", smp)
	}
	helpers = nil
	if smp := sample(t, s); len(smp.GPUs[0].Foreign) != 1 {
		t.Fatalf("without its helper, the same process is foreign: %+v", smp)
	}
	fake.SetBehaviour(fakesmi.QueryApps, fakesmi.Behaviour{Exit: 9})
	if smp := sample(t, s); smp.Apps {
		t.Fatalf("a failed process query: Apps %v", smp.Apps)
	}
}
