package nvsmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// DefaultTimeout is how long one nvidia-smi call may take. A healthy one
// answers in well under a second; one stuck in the driver (a GPU fallen off
// the bus) can hang for minutes.
const DefaultTimeout = 5 * time.Second

// Runner runs nvidia-smi with args and returns its standard output. Its
// errors are worded for the worker's state (see Command).
type Runner func(ctx context.Context, args []string) ([]byte, error)

// BinFromEnv is the nvidia-smi to run: $NVIDIA_SMI when set, else
// "nvidia-smi" looked up on PATH.
func BinFromEnv() string {
	if b := os.Getenv("NVIDIA_SMI"); b != "" {
		return b
	}
	return "nvidia-smi"
}

// Output limits: nvidia-smi's answer for 8 GPUs is a few hundred bytes; a
// binary that prints without end must not fill the worker's memory.
const (
	maxStdout = 1 << 20
	maxStderr = 4 << 10
)

// Command returns a Runner that executes bin in a process group of its own,
// killing the whole group (a hung driver call may sit in a child) after
// timeout. Its errors: "nvidia-smi not found ...", "... timed out after 5s",
// "... failed (exit status 9): <first line of its message>".
func Command(bin string, timeout time.Duration) Runner {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return func(ctx context.Context, args []string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		stdout := &capped{max: maxStdout}
		stderr := &capped{max: maxStderr}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		// Cancel runs before the leader is reaped, so its pid still names
		// the group.
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		// A grandchild outside the group holding stdout would block Wait.
		cmd.WaitDelay = time.Second
		err := cmd.Run()
		what := "nvidia-smi " + queryName(args)
		switch {
		case err == nil:
			if stdout.over {
				return nil, fmt.Errorf("%s printed more than %d bytes", what, maxStdout)
			}
			return stdout.Bytes(), nil
		case ctx.Err() == context.DeadlineExceeded:
			return nil, fmt.Errorf("%s timed out after %s", what, timeout)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("cannot run %s: %w", what, ctx.Err())
		case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("nvidia-smi not found (%s): install the NVIDIA driver, or set NVIDIA_SMI to its path", bin)
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			msg := firstLine(stderr.Bytes())
			if msg == "" {
				msg = firstLine(stdout.Bytes()) // nvidia-smi prints most failures on stdout
			}
			if msg == "" {
				return nil, fmt.Errorf("%s failed (%s)", what, ee.ProcessState)
			}
			return nil, fmt.Errorf("%s failed (%s): %s", what, ee.ProcessState, msg)
		}
		return nil, fmt.Errorf("cannot run %s: %w", what, err)
	}
}

// queryName is "--query-gpu" for "--query-gpu=index,...".
func queryName(args []string) string {
	if len(args) == 0 {
		return ""
	}
	name, _, _ := strings.Cut(args[0], "=")
	return name
}

// firstLine is the first non-empty line of b, printable, at most 200 bytes.
func firstLine(b []byte) string {
	for _, l := range lines(b) {
		return printable(l, 200)
	}
	return ""
}

// capped is a buffer that keeps the first max bytes and notes the rest. It
// does not embed bytes.Buffer: io.Copy would use the buffer's ReadFrom and
// bypass the cap.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); len(p) > room {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.buf.Write(p)
}

func (c *capped) Bytes() []byte { return c.buf.Bytes() }
