// Package pywheel writes the Python wheel the tests of Python environments
// install offline (issue 27): a pure-Python package written by hand, with
// no network and no build backend, for pip to find with PIP_FIND_LINKS and
// PIP_NO_INDEX=1. Imported by tests only.
package pywheel

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Package is the distribution the wheel holds, and Module its import name.
const (
	Package = "rlsched-envtest"
	Module  = "rlsched_envtest"
)

// Write writes Package 1.0 into dir, readable by every uid (pip lists dir
// as the run's uid); its module says VALUE = value.
func Write(t testing.TB, dir, value string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, Module+"-1.0-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z := zip.NewWriter(f)
	info := Module + "-1.0.dist-info/"
	files := []struct{ name, body string }{
		{Module + "/__init__.py", fmt.Sprintf("VALUE = %q\n", value)},
		{info + "METADATA", "Metadata-Version: 2.1\nName: " + Package + "\nVersion: 1.0\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: rlsched-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, fl := range files {
		w, err := z.Create(fl.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(fl.body)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(fl.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", fl.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(fl.body))
	}
	record.WriteString(info + "RECORD,,\n")
	w, err := z.Create(info + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(record.String())); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// NeedVenv skips t outside CI where python3 cannot make a venv with pip
// (Debian's python3 without python3-venv, which .ci/run installs).
func NeedVenv(t testing.TB) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("python3", "-m", "venv", filepath.Join(dir, "v")).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 -m venv: %v\n%s", err, out)
		}
		t.Skipf("python3 cannot make a venv here: %v\n%s", err, out)
	}
}
