package nvsmi

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
)

func TestCommand(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "NVIDIA H200")...)
	run := Command(fake.Bin, DefaultTimeout)
	ctx := context.Background()

	out, err := run(ctx, GPUArgs)
	if err != nil {
		t.Fatal(err)
	}
	gpus, warns := ParseGPUs(out)
	if len(gpus) != 2 || gpus[1].UUID != fakesmi.UUID(1) || gpus[1].Name != "NVIDIA H200" || len(warns) != 0 {
		t.Fatalf("GPUs %+v, warnings %q", gpus, warns)
	}

	fail := func(b fakesmi.Behaviour, want string) {
		t.Helper()
		fake.SetBehaviour(fakesmi.QueryApps, b)
		out, err := run(ctx, AppArgs)
		if err == nil || err.Error() != want {
			t.Fatalf("%d bytes, %v; want the error %q", len(out), err, want)
		}
	}
	fail(fakesmi.Behaviour{Exit: 9, Stdout: "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"},
		"nvidia-smi --query-compute-apps failed (exit status 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
	fail(fakesmi.Behaviour{Exit: 15, Stdout: "0, x\n", Stderr: "\nUnable to determine the device handle for GPU0000:01:00.0: \x1b[31mUnknown Error\n"},
		"nvidia-smi --query-compute-apps failed (exit status 15): Unable to determine the device handle for GPU0000:01:00.0: [31mUnknown Error")
	fail(fakesmi.Behaviour{Exit: 3}, "nvidia-smi --query-compute-apps failed (exit status 3)")
	huge := strings.Repeat("x", maxStdout+1)
	fail(fakesmi.Behaviour{Output: &huge}, "nvidia-smi --query-compute-apps printed more than 1048576 bytes")

	missing := filepath.Join(t.TempDir(), "nvidia-smi")
	for _, bin := range []string{missing, "rlsched-no-such-nvidia-smi"} {
		_, err := Command(bin, DefaultTimeout)(ctx, GPUArgs)
		want := "nvidia-smi not found (" + bin + "): install the NVIDIA driver, or set NVIDIA_SMI to its path"
		if err == nil || err.Error() != want {
			t.Fatalf("%s: %v, want %q", bin, err, want)
		}
	}
}

// TestCommandHang: a hung nvidia-smi is killed at the timeout with its
// whole group, including the child that holds its stdout.
func TestCommandHang(t *testing.T) {
	fake := fakesmi.Install(t)
	fake.SetBehaviour(fakesmi.QueryGPU, fakesmi.Behaviour{Hang: true})
	// The default timeout leaves the fake time to start and fork even on a
	// loaded machine.
	_, err := Command(fake.Bin, DefaultTimeout)(context.Background(), GPUArgs)
	if err == nil || err.Error() != "nvidia-smi --query-gpu timed out after 5s" {
		t.Fatalf("err %v, want a timeout", err)
	}
	pids := fake.HangPIDs()
	if len(pids) != 2 {
		t.Fatalf("hang.pids %v: the fake did not get to hang", pids)
	}
	// Without the group kill the child would outlive the call, holding
	// the pipe.
	waitFor(t, "the hung nvidia-smi's child to be killed", func() bool {
		return syscall.Kill(pids[1], 0) == syscall.ESRCH || isZombie(pids[1])
	})
}
