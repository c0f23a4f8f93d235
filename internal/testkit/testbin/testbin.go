// Package testbin gives process tests the rlsched binary under test: the one
// named by $RLSCHED_BIN (the Makefile builds it once for all packages), else
// one built from ./cmd/rlsched into a temporary directory.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build returns the binary's path and a cleanup that removes what it built.
// Run it from a package inside this module: `go build` of the import path
// finds the module from the working directory.
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
