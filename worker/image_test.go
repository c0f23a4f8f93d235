package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testimage"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
)

// imageWorker starts a worker with runs under uids of their own and the
// test image's podman; devDir holds its GPUs' fake nodes.
func imageWorker(t *testing.T, m *fakeMaster, devDir string) string {
	t.Helper()
	flags, image := testimage.Need(t)
	isoWorker(t, m, isolation.UIDRange{First: 62140, Last: 62149}, func(c *Config) {
		c.ContainerFlags, c.devDir = flags, devDir
		c.GPUs[0].Minor, c.GPUs[1].Minor = 0, 1
	})
	return image
}

// imageRun runs e to its end (an image's start takes seconds on vfs).
func imageRun(t *testing.T, m *fakeMaster, mc *masterConn, e *pb.ExecuteTask) (*pb.TaskFinished, string) {
	t.Helper()
	mc.send(e)
	fin := mc.finished(t, e.GetTaskId(), 90*time.Second)
	mc.send(&pb.TaskFinishedAck{TaskId: e.GetTaskId(), Attempt: e.GetAttempt()})
	return fin, m.log(e.GetTaskId(), e.GetAttempt())
}

// TestImage_RunsInImage: a run with an image runs its argv (no shell) in
// the image, under its own uid, in its workdir mounted from the worker,
// with its env (and no secret of the worker's), its output dir writable,
// and only its own GPU's device node; the worker says it has podman.
func TestImage_RunsInImage(t *testing.T) {
	needCgroupV1(t)
	t.Setenv("RLSCHED_TEST_SECRET_TOKEN", "hunter2")
	devDir := testutil.ReachableTempDir(t)
	for i := range 2 {
		if err := syscall.Mknod(filepath.Join(devDir, "nvidia"+strconv.Itoa(i)), syscall.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(i)))); err != nil {
			t.Fatal(err)
		}
	}
	m := newFakeMaster(t, testToken)
	image := imageWorker(t, m, devDir)
	mc := m.next(t)
	if !slices.Contains(mc.hello.GetRuntimes(), "podman") {
		t.Fatalf("Hello.runtimes %v, want podman", mc.hello.GetRuntimes())
	}
	work := testutil.ReachableTempDir(t)
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "input.txt"), []byte("from the worker's tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// No shell: the ';' and '$X' are arguments of echo, as written.
	fin, out := imageRun(t, m, mc, &pb.ExecuteTask{TaskId: "t-img", Attempt: 1, Image: image, Workdir: work,
		GpuIndices: []int32{1}, Env: map[string]string{"MY_VAR": "mine"},
		Argv: []string{"bash", "-c", `echo "marker $(cat ` + testimage.Marker + `)"; echo "uid $(id -u)"; echo "cwd $(pwd)"; cat input.txt;
echo "var $MY_VAR"; echo "secret [$RLSCHED_TEST_SECRET_TOKEN]"; ls ` + devDir + ` | sed 's/^/dev /';
echo written > "$RLSCHED_OUTPUT_DIR/out.txt"; echo "out $?"`}})
	if fin.GetExitCode() != 0 || fin.GetOutcome() != pb.Outcome_OUTCOME_EXITED {
		t.Fatalf("run: %v\n%s", fin, out)
	}
	for _, want := range []string{"marker " + testimage.MarkerContents, "cwd " + work, "from the worker's tree",
		"var mine", "secret []", "dev nvidia1", "out 0", "[rlsched] image " + image} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "dev nvidia0") {
		t.Errorf("the run of GPU 1 has GPU 0's node:\n%s", out)
	}
	uid := -1
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "uid "); ok {
			uid, _ = strconv.Atoi(v)
		}
	}
	if uid < 62140 || uid > 62149 {
		t.Errorf("the run's uid in its image is %d, want one of 62140-62149:\n%s", uid, out)
	}
	if f := m.file("t-img", 1, "out.txt"); f == nil {
		t.Errorf("the output file written in the image did not come back")
	}
}

// TestImage_MemoryLimitHolds: the run's control group holds its container:
// a run past its memory limit in the image is killed at it. (Its reason is
// not out_of_memory yet: v1 counts the kill in the container's group,
// which the runtime removes with the container.)
func TestImage_MemoryLimitHolds(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	image := imageWorker(t, m, "")
	mc := m.next(t)
	// tail keeps the last "line" of /dev/zero, which never ends.
	fin, out := imageRun(t, m, mc, &pb.ExecuteTask{TaskId: "t-img-oom", Attempt: 1, Image: image, MemoryMb: 64,
		Argv: []string{"tail", "/dev/zero"}})
	if fin.GetExitCode() != 137 || fin.GetPeakMemoryMb() < 60 || fin.GetPeakMemoryMb() > 65 {
		t.Fatalf("the run over its memory in its image: %v\n%s", fin, out)
	}
}

// TestImage_Missing: an image that is on no worker and cannot be pulled
// fails the start, saying so in the run's log and error.
func TestImage_Missing(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	imageWorker(t, m, "")
	mc := m.next(t)
	fin, out := imageRun(t, m, mc, &pb.ExecuteTask{TaskId: "t-img-none", Attempt: 1, Image: "localhost/rlsched-no-such-image:1",
		Argv: []string{"true"}})
	want := "image localhost/rlsched-no-such-image:1 does not exist on this worker and cannot be pulled"
	if fin.GetOutcome() != pb.Outcome_OUTCOME_START_FAILED || !strings.Contains(fin.GetError(), want) || !strings.Contains(out, want) {
		t.Fatalf("the run of a missing image: %v\n%s", fin, out)
	}
}

// TestImage_CancelStopsContainer: a cancelled run in an image gets its
// SIGTERM (pid 1 of the container is an init that forwards it, so a plain
// sleep dies of it, within the grace) and leaves no container behind.
func TestImage_CancelStopsContainer(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	image := imageWorker(t, m, "")
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-img-stop", Attempt: 1, Fence: 3, Image: image, Argv: []string{"sleep", "600"}})
	mc.expect(t, 90*time.Second, "TaskStarted of t-img-stop", func(msg proto.Message) bool {
		s, ok := msg.(*pb.TaskStarted)
		return ok && s.GetTaskId() == "t-img-stop"
	})
	// The container is up once its process is: podman ps lists it as
	// running. Listed while still created, a SIGTERM can come before
	// podman proxies signals to it, and only the grace's SIGKILL ends it
	// (CI under load, once).
	flags, _ := testimage.Need(t)
	ps := func(filter ...string) string {
		out, _ := exec.Command("podman", append(append(flags, "ps", "-a", "--format", "{{.Names}}", "--filter", "name=rlsched-t-img-stop-1-3"), filter...)...).Output()
		return strings.TrimSpace(string(out))
	}
	waitFor(t, 60*time.Second, "the container running", func() bool { return ps("--filter", "status=running") != "" })
	cancelled := time.Now()
	mc.send(&pb.CancelTask{TaskId: "t-img-stop", Attempt: 1, Fence: 3, Reason: "test", GraceMs: 60000})
	fin := mc.finished(t, "t-img-stop", 90*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_CANCELLED || time.Since(cancelled) > 45*time.Second {
		t.Fatalf("TaskFinished %v, %v after the cancel (grace 60 s): SIGTERM did not stop it", fin, time.Since(cancelled))
	}
	if left := ps(); left != "" {
		t.Fatalf("a container is left: %s", left)
	}
}

// TestImage_InteractiveSession (issue 34's --image): a session in an image
// gets the image's login shell on a terminal of its own, as the run's uid;
// the window size reaches it, and exiting the shell ends the run.
func TestImage_InteractiveSession(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	image := imageWorker(t, m, "")
	mc := m.next(t)
	fence := uint64(4)
	mc.send(&pb.ExecuteTask{TaskId: "t-img-sh", Attempt: 1, Fence: fence, Image: image, Interactive: true})
	st := mc.expect(t, 90*time.Second, "TaskStarted of t-img-sh", func(msg proto.Message) bool {
		s, ok := msg.(*pb.TaskStarted)
		return ok && s.GetTaskId() == "t-img-sh"
	}).(*pb.TaskStarted)
	if st.GetError() != "" {
		t.Fatalf("start: %v", st)
	}
	r := &termReader{mc: mc, task: "t-img-sh"}
	var inOff uint64
	typeIn := func(s string) {
		mc.send(&pb.TermInput{TaskId: "t-img-sh", Attempt: 1, Fence: fence, Offset: inOff, Data: []byte(s)})
		inOff += uint64(len(s))
	}
	// Once the shell is up in the container, its runtime relays the
	// window size (SIGWINCH); the line is typed again until the size has
	// arrived, as a user would.
	// The container starts after the run did: seconds on vfs, more on a
	// loaded machine.
	r.within(t, 90*time.Second, "the shell's first prompt", func(out string) bool { return out != "" })
	mc.send(&pb.TermResize{TaskId: "t-img-sh", Attempt: 1, Fence: fence, Cols: 101, Rows: 33})
	line := "echo size=$(stty size) uid=$(id -u) tty=$(test -t 0 && echo yes) shell=$0 marker=$(tr ' ' _ < " + testimage.Marker + ")\r"
	for try := 1; try <= 5 && !strings.Contains(r.out.String(), "size=33 101 "); try++ {
		n := strings.Count(r.out.String(), "marker=rlsched")
		typeIn(line)
		r.until(t, "the line's output", func(out string) bool { return strings.Count(out, "marker=rlsched") > n })
	}
	out := r.out.String()
	if !regexp.MustCompile(`size=33 101 uid=6214\d tty=yes shell=\S*bash marker=rlsched-test-image_bookworm`).MatchString(out) {
		t.Fatalf("want the window size, the run's uid, a terminal, bash and the image's file; terminal: %q", out)
	}
	typeIn("exit\r")
	fin := mc.finished(t, "t-img-sh", 60*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_EXITED || fin.GetExitCode() != 0 {
		t.Fatalf("TaskFinished: %v\nterminal: %q", fin, r.out.String())
	}
}

// TestImage_GPUDevices: a run's GPUs go into its container as CDI names
// (CONTAINER_GPUS=cdi, by index) or as the device nodes of their minors
// and the driver's control nodes; a GPU without its node fails the start.
func TestImage_GPUDevices(t *testing.T) {
	all := []GPU{{Index: 0, Minor: 4}, {Index: 1, Minor: 7}}
	cdi := &containerRuntime{gpus: ContainerGPUsCDI}
	if got, err := cdi.gpuDevices(all, []int{1, 0}); err != nil ||
		!slices.Equal(got, []string{"--device", "nvidia.com/gpu=1", "--device", "nvidia.com/gpu=0"}) {
		t.Fatalf("cdi: %v %v", got, err)
	}
	dev := t.TempDir()
	for _, n := range []string{"nvidia7", "nvidiactl"} {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nodes := &containerRuntime{gpus: ContainerGPUsDevices, devDir: dev}
	if got, err := nodes.gpuDevices(all, []int{1}); err != nil ||
		!slices.Equal(got, []string{"--device", filepath.Join(dev, "nvidia7"), "--device", filepath.Join(dev, "nvidiactl")}) {
		t.Fatalf("devices: %v %v", got, err)
	}
	if _, err := nodes.gpuDevices(all, []int{0}); err == nil || !strings.Contains(err.Error(), "cannot pass GPU 0") {
		t.Fatalf("a GPU without its node: %v", err)
	}
	if got, err := nodes.gpuDevices(all, nil); err != nil || got != nil {
		t.Fatalf("no GPUs: %v %v", got, err)
	}
}
