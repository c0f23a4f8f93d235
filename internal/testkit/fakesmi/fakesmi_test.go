package fakesmi

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// smi runs the fake with args and returns its stdout, stderr and exit status.
func smi(t *testing.T, f *Fake, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(f.Bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("cannot run the fake: %v", err)
	return "", "", 0
}

const (
	gpuQuery  = "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu"
	appsQuery = "--query-compute-apps=gpu_uuid,pid,used_memory"
	csv       = "--format=csv,noheader,nounits"
)

func TestAnswers(t *testing.T) {
	f := Install(t)
	gpus := GPUs(2, "NVIDIA A100-SXM4-40GB")
	gpus[1].MemoryUsedMB, gpus[1].UtilizationPct = 1200, 87
	f.SetGPUs(gpus...)
	f.SetProcs(Proc{GPUUUID: UUID(1), PID: 4242, UsedMemoryMB: 1100})

	fn := func(want string, args ...string) {
		t.Helper()
		out, errs, code := smi(t, f, args...)
		if code != 0 || out != want {
			t.Fatalf("nvidia-smi %v = %q (stderr %q, exit %d), want %q", args, out, errs, code, want)
		}
	}
	u0, u1 := UUID(0), UUID(1)
	fn("0, "+u0+", NVIDIA A100-SXM4-40GB, 40960, 0, 0\n1, "+u1+", NVIDIA A100-SXM4-40GB, 40960, 1200, 87\n",
		gpuQuery, csv)
	// Any field order, and the separate-argument form.
	fn("0, 0\n87, 1\n", "--query-gpu", "utilization.gpu,index", "--format", "csv,noheader,nounits")
	fn("40960\n39760\n", "--query-gpu=memory.free", csv)
	// Units and header unless asked away.
	fn("index, memory.used [MiB], utilization.gpu [%]\n0, 0 MiB, 0 %\n1, 1200 MiB, 87 %\n",
		"--query-gpu=index,memory.used,utilization.gpu", "--format=csv")
	fn(u1+", 4242, 1100\n", appsQuery, csv)
	fn("4242, python, NVIDIA A100-SXM4-40GB\n", "--query-compute-apps=pid,process_name,gpu_name", csv)
	fn("GPU 0: NVIDIA A100-SXM4-40GB (UUID: "+u0+")\nGPU 1: NVIDIA A100-SXM4-40GB (UUID: "+u1+")\n", "-L")

	// Bad output on request.
	f.Update(func(s *State) {
		s.GPUs[0].Raw = map[string]string{"utilization.gpu": "[N/A]", "memory.used": "[Not Supported]"}
	})
	f.SetBehaviour(QueryGPU, Behaviour{Spaces: 2, CRLF: true})
	fn("  0,   [Not Supported],   [N/A]  \r\n  1,   1200,   87  \r\n",
		"--query-gpu=index,memory.used,utilization.gpu", csv)
	junk := "0, GPU-x\n"
	f.SetBehaviour(QueryGPU, Behaviour{Output: &junk})
	fn(junk, gpuQuery, csv)

	f.SetProcs()
	fn("", appsQuery, csv)
}

func TestFailures(t *testing.T) {
	f := Install(t)
	f.SetGPUs(GPUs(1, "Tesla T4")...)
	fn := func(wantOut, wantErr string, wantCode int, args ...string) {
		t.Helper()
		out, errs, code := smi(t, f, args...)
		if code != wantCode || !strings.Contains(out, wantOut) || !strings.Contains(errs, wantErr) {
			t.Fatalf("nvidia-smi %v = %q, stderr %q, exit %d; want %q, %q, %d", args, out, errs, code, wantOut, wantErr, wantCode)
		}
	}
	fn(`Field "temperature.gpu" is not a valid field`, "", 2, "--query-gpu=index,temperature.gpu", csv)
	fn("Invalid combination", "", 2, "--bogus")
	f.SetBehaviour(QueryApps, Behaviour{Exit: 9, Stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"})
	fn("couldn't communicate", "", 9, appsQuery, csv)
	fn("0, ", "", 0, gpuQuery, csv) // only the query named misbehaves
	f.SetBehaviour(QueryGPU, Behaviour{Exit: 15, Stderr: "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error\n"})
	fn("", "Unknown Error", 15, gpuQuery, csv)
}

func TestHang(t *testing.T) {
	f := Install(t)
	f.SetBehaviour(QueryGPU, Behaviour{Hang: true})
	cmd := exec.Command(f.Bin, gpuQuery, csv)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	testutil.WaitFor(t, 30*time.Second, "the hanging fake writing hang.pids", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the hanging fake exited: %v", err)
		default:
		}
		return len(f.HangPIDs()) == 2
	})
	pids := f.HangPIDs()
	if pids[0] != cmd.Process.Pid {
		t.Fatalf("hang.pids = %v, want the leader %d first", pids, cmd.Process.Pid)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
}

// SetProcMemory adds, changes and removes one process's row.
func TestSetProcMemory(t *testing.T) {
	f := Install(t)
	f.SetGPUs(GPUs(1, "NVIDIA A10")...)
	u := UUID(0)
	want := func(rows string) {
		t.Helper()
		if out, _, code := smi(t, f, appsQuery, csv); code != 0 || out != rows {
			t.Fatalf("apps = %q (exit %d), want %q", out, code, rows)
		}
	}
	f.SetProcMemory(u, 100, 500)
	f.SetProcMemory(u, 200, 700)
	want(u + ", 100, 500\n" + u + ", 200, 700\n")
	f.SetProcMemory(u, 100, 9210)
	want(u + ", 100, 9210\n" + u + ", 200, 700\n")
	f.SetProcMemory(u, 100, -1)
	want(u + ", 200, 700\n")
}
