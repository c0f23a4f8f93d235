// Package webtest drives the embedded dashboard in a real browser (Debian's
// chromium, headless, through chromedp) against the real binary started as
// `rlsched up`, the way a newcomer uses it. Screenshots of every page go to
// webtest/screenshots/ (ignored by git).
//
// Chromium is found as $RLSCHED_CHROMIUM, else chromium, chromium-browser,
// google-chrome on PATH. Without it the tests skip, or fail under CI=true.
package webtest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// rlschedBin is the binary under test: $RLSCHED_BIN, or built once by TestMain.
var rlschedBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() || runtime.GOOS != "linux" {
		os.Exit(m.Run()) // every test skips itself
	}
	bin, cleanup, err := buildBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webtest:", err)
		os.Exit(1)
	}
	rlschedBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// buildBinary returns $RLSCHED_BIN when set (the Makefile builds it), else
// builds ./cmd/rlsched into a temporary directory.
func buildBinary() (string, func(), error) {
	if b := os.Getenv("RLSCHED_BIN"); b != "" {
		abs, err := filepath.Abs(b)
		if err != nil {
			return "", nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", nil, fmt.Errorf("RLSCHED_BIN=%s: %w", b, err)
		}
		return abs, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "rlsched-webtest-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "rlsched")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/rlsched/rlsched/cmd/rlsched")
	cmd.Dir = ".." // the module root
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("cannot build rlsched: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
