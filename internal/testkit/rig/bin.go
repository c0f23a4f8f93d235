package rig

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// The binary under test, built at most once per test binary (see Bin).
var (
	binOnce    sync.Once
	binPath    string
	binErr     error
	binCleanup = func() {}
)

// Main runs a package's tests (call it from TestMain) and removes the
// binary Bin built, if it built one.
func Main(m *testing.M) {
	flag.Parse()
	code := m.Run()
	binCleanup()
	os.Exit(code)
}

// Bin returns the binary under test, building it on first use (see Build).
// It skips t under -short and off Linux, where the process tests do not run.
func Bin(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process test: skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("process tests need Linux")
	}
	binOnce.Do(func() { binPath, binCleanup, binErr = Build("rig") })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// Build returns the binary named by $RLSCHED_BIN (the Makefile builds it
// once for all packages), else one built from ./cmd/rlsched into a
// temporary directory, and a cleanup that removes what it built. Run it
// from a package inside this module: `go build` of the import path finds
// the module from the working directory.
func Build(name string) (string, func(), error) {
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
	dir, err := os.MkdirTemp("", "rlsched-"+name+"-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "rlsched")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", bin, "github.com/rlsched/rlsched/cmd/rlsched")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("cannot build rlsched: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
