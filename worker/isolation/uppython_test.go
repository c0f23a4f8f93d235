package isolation

import (
	"os"
	"path/filepath"
	"testing"
)

// rlsched up takes the first python3 every uid can run when the first on
// PATH lies in a private directory, and nothing when that one is reachable.
func TestUnreachablePython(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3") // Debian's python3 is what the tests run with
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // the test's temporary dirs are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(dir string, mode os.FileMode) string {
		d := filepath.Join(base, dir)
		if err := os.MkdirAll(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, "python3")
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	private, open := mk("private", 0o700), mk("open", 0o755)
	first, fallback := UnreachablePython(private + ":" + open)
	if first != filepath.Join(private, "python3") || fallback != filepath.Join(open, "python3") {
		t.Errorf("private first: got %q, %q; want the private one and the open one", first, fallback)
	}
	if first, fallback := UnreachablePython(private); fallback != "/usr/bin/python3" || first == "" {
		t.Errorf("private alone: got %q, %q; want /usr/bin/python3 as the fallback", first, fallback)
	}
	if first, fallback := UnreachablePython(open + ":" + private); first != "" || fallback != "" {
		t.Errorf("open first: got %q, %q; want nothing to change", first, fallback)
	}
}
