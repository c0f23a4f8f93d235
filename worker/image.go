package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// A run's container image (issue 27; docs/API.md "Container images"): on
// a worker with a container runtime (podman), the run's command runs in
// the image instead of the worker's file system. Everything else is the
// run of a worker without one: its code snapshot (or workdir), output,
// input, private and cache dirs are mounted at the paths its env names;
// its uid is kept (--user); its control group holds the container (the
// runtime's groups are made inside it, --cgroup-parent) and the runtime
// gets its cores and process limit too, so its memory, cores, process
// limit and GPU wall hold (the runtime itself runs outside the group); its GPUs' device nodes are passed
// (--device, or CDI names with CONTAINER_GPUS=cdi); its env passes by
// name, so no value is on the runtime's command line; argv is the image's
// command, never through a shell. The image is pulled (or found) before
// the run starts, its output in the run's log: an image that is not there
// fails the start with that sentence.

// Container settings of a worker (Config.Container*).
const (
	// DefaultContainerNetwork: a run in an image has the network of a run
	// without one.
	DefaultContainerNetwork = "host"
	// ContainerGPUsDevices passes /dev/nvidia<minor> and the control
	// nodes; ContainerGPUsCDI passes nvidia.com/gpu=<index> (the
	// nvidia-container-toolkit's CDI spec, which mounts the driver's
	// libraries too).
	ContainerGPUsDevices = "devices"
	ContainerGPUsCDI     = "cdi"
)

// pullTimeout bounds an image's pull before its run starts.
const pullTimeout = 30 * time.Minute

// containerRuntime is the worker's runtime: nil when it has none.
type containerRuntime struct {
	name    string   // "podman", in Hello.runtimes
	path    string   // its binary
	flags   []string // global flags (CONTAINER_FLAGS), before the command
	network string
	gpus    string // ContainerGPUsDevices or ContainerGPUsCDI
	devDir  string // where the GPUs' nodes are: /dev
}

// openRuntime finds the runtime Config names: "" looks up podman on PATH
// (none found: no runtime), "off" none, else the binary named.
func openRuntime(cfg Config) (*containerRuntime, error) {
	name := cfg.ContainerRuntime
	if name == "off" {
		return nil, nil
	}
	path, err := exec.LookPath(cmpOr(name, "podman"))
	if err != nil {
		if name == "" {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot start worker: CONTAINER_RUNTIME=%s: %v (install podman, or set CONTAINER_RUNTIME=off)", name, err)
	}
	// Found, not run: a start of every worker would wait for it. A
	// runtime that does not work fails its runs' starts, saying why.
	return &containerRuntime{name: "podman", path: path, flags: cfg.ContainerFlags, network: cfg.ContainerNetwork,
		gpus: cfg.ContainerGPUs, devDir: cmpOr(cfg.devDir, "/dev")}, nil
}

// names are Hello.runtimes: none for a nil runtime.
func (rt *containerRuntime) names() []string {
	if rt == nil {
		return nil
	}
	return []string{rt.name}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// command is the runtime with its global flags and args, under ctx.
func (rt *containerRuntime) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, rt.path, append(slices.Clone(rt.flags), args...)...)
}

// checkImage refuses, before anything is made, a run with an image this
// worker cannot run: the master sends none here (Hello.runtimes), so this
// is a check of a master that did.
func (a *agent) checkImage(m *pb.ExecuteTask) error {
	if m.GetImage() == "" {
		return nil
	}
	if err := core.CheckImage(m.GetImage()); err != nil {
		return err
	}
	switch {
	case a.rt == nil:
		return fmt.Errorf("the run asks for image %s, and this worker has no container runtime (install podman on it, or submit without an image)", m.GetImage())
	case m.GetPythonRequirements() != "" || m.GetPythonVenv() != "":
		return errors.New("a run in an image cannot also name a Python environment: install its requirements in the image")
	}
	return nil
}

// pullImage makes sure r's image is on the worker before the run starts:
// found, or pulled with the pull's output in the run's log. An image that
// can be neither is the run's start failure, saying so.
func (a *agent) pullImage(r *run, image string) error {
	ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
	defer cancel()
	if a.rt.command(ctx, "image", "exists", image).Run() == nil {
		runNote(r, fmt.Sprintf("image %s (%s)", image, a.rt.name))
		return nil
	}
	runNote(r, fmt.Sprintf("image %s is not on this worker; pulling it", image))
	var tail bytes.Buffer
	cmd := a.rt.command(ctx, "pull", "--quiet", image)
	cmd.Stdout, cmd.Stderr = r.out, &tail
	err := cmd.Run()
	_, _ = r.out.Write(tail.Bytes())
	if err != nil {
		err = fmt.Errorf("image %s does not exist on this worker and cannot be pulled (%s): check its name, or load it on the workers (podman pull / podman load)", image, lastLine(tail.Bytes()))
		_, _ = fmt.Fprintf(r.out, "[rlsched] cannot start: %v\n", err)
		return err
	}
	return nil
}

// lastLine is the last non-empty line of b, trimmed.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// containerName is r's container's name (podman ps shows it).
func containerName(r *run) string {
	return fmt.Sprintf("rlsched-%s-%d-%d", r.id, r.attempt, r.fence)
}

// containerize turns cmd, the run's command resolved to start in dir,
// into the runtime's `run` of it in r's image. env after hostN entries is
// the run's own (the worker's inherited env comes first, runEnv).
func (a *agent) containerize(r *run, m *pb.ExecuteTask, cmd *exec.Cmd, dir string) error {
	rt := a.rt
	args := []string{"run", "--rm", "--replace", "--name", containerName(r), "--pull=never",
		"--network", cmpOr(rt.network, DefaultContainerNetwork), "--workdir", dir,
		// An init as pid 1 that forwards signals: the run's process keeps
		// the default SIGTERM, which pid 1 would not have.
		"--init"}
	if m.GetInteractive() {
		// The run's PTY is the runtime's stdin: it makes the container a
		// terminal of its own and relays bytes and window sizes (SIGWINCH)
		// between the two.
		args = append(args, "--interactive", "--tty")
	}
	uid, gid := runUID(r.ident), uint32(os.Getgid())
	if r.ident != nil {
		gid = r.ident.GID()
	}
	args = append(args, "--user", fmt.Sprintf("%d:%d", uid, gid))
	// Its limits: its control group's memory holds the container
	// (ContainerParent); its cores and processes are the runtime's to
	// bound too, since a v1 host may keep the controllers' groups at
	// other paths than the memory's (docs/deploy.md).
	parent, held := r.cg.ContainerParent()
	if held {
		args = append(args, "--cgroup-parent", parent)
	} else if mb := m.GetMemoryMb(); mb > 0 {
		args = append(args, "--memory", strconv.FormatInt(mb, 10)+"m")
	}
	if c := m.GetCpuMillis(); c > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(float64(c)/1000, 'f', 3, 64))
	}
	if cores := r.cg.Cores(); cores != "" {
		args = append(args, "--cpuset-cpus", cores)
	}
	args = append(args, "--pids-limit", strconv.FormatInt(a.cfg.PidsMax, 10))
	// The worker's own rlimits: a root runtime would raise them, which a
	// worker without CAP_SYS_RESOURCE may not (docs/deploy.md); processes
	// are bounded by PIDS_MAX, as the run's control group bounds them.
	var nofile, nproc unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile) == nil {
		args = append(args, "--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Cur, nofile.Max))
	}
	if unix.Getrlimit(unix.RLIMIT_NPROC, &nproc) == nil {
		n := min(uint64(a.cfg.PidsMax), nproc.Max)
		args = append(args, "--ulimit", fmt.Sprintf("nproc=%d:%d", n, n))
	}
	// Its dirs, where its env says they are.
	mounts := []string{r.dirs.Private, r.dirs.Out, r.dirs.In, r.cacheDir}
	if m.GetCodeTree() == "" && m.GetWorkdir() != "" {
		mounts = append(mounts, m.GetWorkdir())
	}
	for _, d := range mounts {
		if d != "" {
			args = append(args, "--volume", d+":"+d)
		}
	}
	args = append(args, "--volume", a.scriptsDir+":"+a.scriptsDir+":ro")
	devs, err := rt.gpuDevices(a.cfg.GPUs, r.gpus)
	if err != nil {
		return err
	}
	args = append(args, devs...)
	// Its env by name: the runtime reads the values from its own env, so
	// none is on a command line. The worker's inherited env stays the
	// runtime's: the image has its own PATH and the rest.
	host := cmd.Env[:r.hostEnv]
	own := map[string]string{}
	var names []string
	for _, kv := range cmd.Env[r.hostEnv:] {
		k, v, _ := strings.Cut(kv, "=")
		if _, seen := own[k]; !seen {
			names = append(names, k)
		}
		own[k] = v
	}
	slices.Sort(names)
	var rtEnv []string
	for _, k := range names {
		if k == "PATH" && !hasKey(m.GetEnv(), "PATH") {
			continue // the worker's; the image has its own
		}
		if runtimeReads(k) {
			// The runtime's own; a path the worker made, never a secret.
			args = append(args, "--env", k+"="+own[k])
			continue
		}
		args = append(args, "--env", k)
		rtEnv = append(rtEnv, k+"="+own[k])
	}
	args = append(args, m.GetImage())
	args = append(args, cmd.Args...)
	cmd.Path = rt.path
	cmd.Args = append(append([]string{rt.path}, rt.flags...), args...)
	cmd.Env = append(slices.Clip(host), rtEnv...)
	cmd.Dir = "/"
	return nil
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// runtimeReads: variables the runtime itself reads, which the run's
// values (its private dirs) must not steer; the run gets them by value.
func runtimeReads(k string) bool {
	switch k {
	case "TMPDIR", "HOME", "USER", "LOGNAME":
		return true
	}
	return strings.HasPrefix(k, "XDG_") || strings.HasPrefix(k, "CONTAINERS_")
}

// gpuDevices are the flags that pass the run's GPUs into its container.
func (rt *containerRuntime) gpuDevices(all []GPU, gpus []int) ([]string, error) {
	if len(gpus) == 0 {
		return nil, nil
	}
	var out []string
	if rt.gpus == ContainerGPUsCDI {
		for _, g := range gpus {
			out = append(out, "--device", "nvidia.com/gpu="+strconv.Itoa(g))
		}
		return out, nil
	}
	for _, g := range gpus {
		minor := g
		for _, x := range all {
			if x.Index == g {
				minor = x.Minor
			}
		}
		p := filepath.Join(rt.devDir, "nvidia"+strconv.Itoa(minor))
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("cannot pass GPU %d into the run's image: %v", g, err)
		}
		out = append(out, "--device", p)
	}
	// The driver's control nodes, where there are.
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		if p := filepath.Join(rt.devDir, n); exists(p) {
			out = append(out, "--device", p)
		}
	}
	return out, nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// removeContainer removes what is left of r's container once its
// processes are gone (killed with its control group, the runtime's
// --rm never ran).
func (a *agent) removeContainer(r *run) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := a.rt.command(ctx, "rm", "--force", "--ignore", containerName(r)).CombinedOutput(); err != nil {
		r.log.Warn().Err(err).Str("output", lastLine(out)).Msg("cannot remove the run's container")
	}
}
