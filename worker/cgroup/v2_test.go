package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// fakeV2 is a cgroup2 tree in a temp dir: the worker's own group, delegated
// the controllers, with the worker in it.
func fakeV2(t *testing.T) string {
	t.Helper()
	own := t.TempDir()
	for f, v := range map[string]string{"cgroup.controllers": "cpuset cpu io memory pids", "cgroup.subtree_control": "", "cgroup.procs": "1234\n"} {
		if err := os.WriteFile(filepath.Join(own, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return own
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestV2_FakeTree: the files a v2 host gets: the worker moved into a leaf
// of its own, the controllers enabled for the parent and its runs, each
// run's limits, its device program given the other GPUs' minors, and the
// verdict read back from memory.events and pids.events.
func TestV2_FakeTree(t *testing.T) {
	own := fakeV2(t)
	var attached []string
	o := Options{Mode: Required, Name: "w1", Cores: []int{0, 1, 2, 3}, MemoryMB: 8192, PidsMax: 4096,
		GPUs: []GPU{{0, 0}, {1, 1}, {2, 3}}, Hierarchy: &Hierarchy{Version: 2, V2: own}, Log: zerolog.New(zerolog.NewTestWriter(t))}
	m, err := openWith(o, func(dir string, deny []int) error {
		attached = append(attached, filepath.Base(dir)+":"+FormatList(deny))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind() != KindV2 {
		t.Fatalf("kind %q", m.Kind())
	}
	parent := filepath.Join(own, "rlsched-w1")
	for p, want := range map[string]string{
		filepath.Join(own, "rlsched-w1.self", "cgroup.procs"): itoa(os.Getpid()),
		filepath.Join(own, "cgroup.subtree_control"):          "+cpu +cpuset +memory +pids",
		filepath.Join(parent, "cgroup.subtree_control"):       "+cpu +cpuset +memory +pids",
		filepath.Join(parent, "memory.max"):                   itoa(8192 << 20),
		filepath.Join(parent, "memory.swap.max"):              "0",
		filepath.Join(parent, "cpuset.cpus"):                  "0-3",
	} {
		if got := readFile(t, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	g, err := m.Create("t1", 2, 7, Limits{CPUMillis: 2000, MemoryMB: 4096, GPUs: []int{1}, Near: []int{2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(parent, "t1.2.7")
	if g.Dir() != d {
		t.Fatalf("dir %q, want %q", g.Dir(), d)
	}
	// A memory.swap.max the kernel has (swap accounted) gets 0.
	for f, want := range map[string]string{"memory.max": itoa(4096 << 20), "memory.oom.group": "1", "cpu.max": "200000 100000",
		"cpuset.cpus": "2-3", "pids.max": "4096"} {
		if got := readFile(t, filepath.Join(d, f)); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	// The worker keeps off the run's exclusive cores.
	if got := readFile(t, filepath.Join(own, "rlsched-w1.self", "cpuset.cpus")); got != "0-1" {
		t.Errorf("the worker's own cores %q, want 0-1", got)
	}
	shared, err := m.Create("t2", 1, 1, Limits{CPUMillis: 250})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(shared.Dir(), "cpuset.cpus")); got != "0-1" {
		t.Errorf("the shared run's cores %q, want 0-1", got)
	}
	// CPU weights: 16 processes a core, at least one a run; the parent the
	// sum.
	unlimited, err := m.Create("t3", 1, 1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{filepath.Join(d, "cpu.weight"): "3200", filepath.Join(shared.Dir(), "cpu.weight"): "400",
		filepath.Join(unlimited.Dir(), "cpu.weight"): "100", filepath.Join(parent, "cpu.weight"): "3700"} {
		if got := readFile(t, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	unlimited.Remove()
	if got := readFile(t, filepath.Join(parent, "cpu.weight")); got != "3600" {
		t.Errorf("the parent's weight after a run's end %q, want 3600", got)
	}
	if want := []string{"probe:0", "t1.2.7:0,3", "t2.1.1:0-1,3", "t3.1.1:0-1,3"}; !slices.Equal(attached, want) {
		t.Errorf("device programs %v, want %v", attached, want)
	}
	for f, v := range map[string]string{"memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n",
		"memory.peak": itoa(4100 << 20), "cpu.stat": "usage_usec 1500000\nuser_usec 1000000\n", "pids.events": "max 0\n", "cgroup.procs": ""} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "memory.current"), []byte(itoa(812<<20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := g.Now(); n.CPUNanos != 1500000000 || n.MemoryBytes != 812<<20 {
		t.Fatalf("Now %+v, want cpu.stat's usage_usec in ns and memory.current", n)
	}
	if _, err := g.Kill(time.Second); err != nil {
		t.Fatal(err)
	}
	u := g.Usage()
	if u.Reason() != ReasonOOM || u.PeakMemoryMB != 4100 || u.CPUSeconds != 1.5 || u.MemoryLimitMB != 4096 {
		t.Fatalf("usage %+v", u)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestV2_DeviceProgram attaches the real device program to a group of the
// host's cgroup2 mount (a hybrid host has one without controllers; the
// program needs none) and opens GPU nodes made with mknod from inside it.
func TestV2_DeviceProgram(t *testing.T) {
	testutil.NeedRoot(t)
	h, err := Detect()
	if err != nil || h.V2 == "" {
		t.Skip("no cgroup2 mount")
	}
	d := filepath.Join(h.V2, "rlsched-devtest-"+itoa(os.Getpid()))
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Skipf("cannot create a cgroup2 group: %v", err)
	}
	defer os.Remove(d)
	if err := attachDeviceProgram(d, []int{1}); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no BPF here: %v", err)
	}
	dir := t.TempDir()
	for i := range 2 {
		if err := syscall.Mknod(filepath.Join(dir, "nvidia"+itoa(i)), syscall.S_IFCHR|0o666, int(unixMkdev(nvidiaMajor, uint32(i)))); err != nil {
			t.Fatal(err)
		}
	}
	g := &Group{m: &Manager{kind: KindV2}, dirs: map[string]string{"": d}}
	out, _ := startOutput(t, g, "python3", "-c", `
import os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDONLY)); print("opened")
    except OSError as e:
        print(e.errno)
`, filepath.Join(dir, "nvidia0"), filepath.Join(dir, "nvidia1"), "/dev/null")
	f := strings.Fields(out)
	if len(f) != 3 || f[0] == itoa(int(syscall.EPERM)) || f[1] != itoa(int(syscall.EPERM)) || f[2] != "opened" {
		t.Fatalf("own GPU, other GPU, /dev/null: %q; want not EPERM, EPERM (%d), opened", out, syscall.EPERM)
	}
}
