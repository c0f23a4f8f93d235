package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// NumpyPython is a python3 that imports numpy (the textbook reference of
// package stats' estimators, stats/testdata/reference.py): the first
// python3 on PATH that does, else Debian's. Without one the test is
// skipped, except under CI=true (.ci/run installs python3-numpy), where it
// fails.
func NumpyPython(t testing.TB) string {
	t.Helper()
	var cands []string
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if exec.Command(p, "-c", "import numpy").Run() == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no python3 with numpy (tried %v) under CI=true: apt-get install python3-numpy", cands)
	}
	t.Skipf("no python3 with numpy (tried %v): apt-get install python3-numpy", cands)
	return ""
}
