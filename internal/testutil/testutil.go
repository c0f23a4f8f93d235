// Package testutil holds the helpers that tests of several packages share,
// each written once: a temp dir that runs under uids of their own can enter.
// It is imported by tests only.
package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// ReachableTempDir is a t.TempDir that runs under uids of their own can
// enter (t.TempDir's parent is mode 0700): the data dir of a worker run as
// root, or a dir holding one.
func ReachableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
