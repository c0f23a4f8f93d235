package outputs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/backoff"
)

// TestRefusalsBounded (issue 25): a run that makes thousands of links gets
// a bounded listing and at most maxRefusalNotes lines in its log, then one
// more, once; a hard link past the listed ones still keeps the dir.
func TestRefusalsBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range 3 * maxListedRefusals {
		if err := os.Symlink("/etc/passwd", filepath.Join(dir, fmt.Sprintf("a%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "z1"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "z1"), filepath.Join(dir, "z2")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	var lines []string
	o := NewLink(time.Second, backoff.Backoff{}, func() {}).NewFiles("r1", 1, 1, zerolog.Nop(), func(l string) { lines = append(lines, l) }, d)
	for range 2 {
		ls, err := d.walk(maxWalk, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls.refused) != maxListedRefusals || !ls.kept || len(ls.files) != 1 || ls.files[0].rel != "ok" {
			t.Fatalf("listing: %d refused, kept %v, files %v", len(ls.refused), ls.kept, ls.files)
		}
		o.refuse(ls)
	}
	if len(lines) != maxRefusalNotes+1 || !strings.HasPrefix(lines[maxRefusalNotes], "more files of the output dir are not uploaded") {
		t.Fatalf("%d lines in the run's log, the last %q", len(lines), lines[len(lines)-1])
	}
	if !o.partial {
		t.Fatal("a hard link refused, and the dir is not kept")
	}
	if _, err := d.open("z1"); err == nil || !strings.Contains(err.Error(), "it has 2 hard links") {
		t.Fatalf("open of a hard-linked file: %v", err)
	}
	if _, err := d.open("a00000"); err == nil || !strings.Contains(err.Error(), whySymlink) {
		t.Fatalf("open of a symbolic link: %v", err)
	}
}
