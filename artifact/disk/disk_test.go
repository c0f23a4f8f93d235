package disk

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/artifact/artifacttest"
)

func TestConformance(t *testing.T) {
	artifacttest.Run(t, artifacttest.Harness{
		New: func(t *testing.T) artifact.Store {
			s, err := Open(filepath.Join(t.TempDir(), "artifacts"))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		List: func(t *testing.T, st artifact.Store) []string {
			return files(t, filepath.Dir(st.(*Store).blobs))
		},
	})
}

// files lists every regular file under dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Blobs land under sha256/ab/cd/ with owner-only permissions.
func TestLayoutAndPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "artifacts")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Put(t.Context(), strings.NewReader("hello"), 5)
	if err != nil {
		t.Fatal(err)
	}
	rel := filepath.Join("sha256", b.SHA256[:2], b.SHA256[2:4], b.SHA256)
	if got := files(t, dir); len(got) != 1 || got[0] != rel {
		t.Fatalf("files = %q, want [%q]", got, rel)
	}
	fi, err := os.Stat(filepath.Join(dir, rel))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("blob mode = %v, %v; want 0600", fi.Mode(), err)
	}
	for _, d := range []string{"", "sha256", "tmp", filepath.Dir(rel)} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("directory %q mode = %v, %v; want 0700", d, fi.Mode(), err)
		}
	}
}

// Open removes temporary files a crash left a day ago, and keeps younger
// ones (another master may be writing them).
func TestOpenRemovesStaleTemps(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	old, young := filepath.Join(dir, "tmp", "put-old"), filepath.Join(dir, "tmp", "put-young")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("a day-old temporary file survived Open: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("a fresh temporary file was removed: %v", err)
	}
}

func TestOpenEmptyDir(t *testing.T) {
	if _, err := Open(""); err == nil {
		t.Fatal("Open(\"\") succeeded, want an error naming ARTIFACT_DIR")
	}
}

// Adopt commits a staged file by rename, drops a duplicate, and refuses a
// size that differs, leaving nothing behind in any case.
func TestAdopt(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "artifacts")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	stage := func(data string) *os.File {
		t.Helper()
		f, err := os.CreateTemp(s.StageDir(), "up-*")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
		return f
	}
	h := artifact.NewHasher(5)
	if _, err := io.Copy(io.Discard, h.Reader(t.Context(), strings.NewReader("hello"))); err != nil {
		t.Fatal(err)
	}
	b := h.Sum()
	for range 2 { // the second is a duplicate
		if err := s.Adopt(t.Context(), stage("hello"), b); err != nil {
			t.Fatalf("Adopt: %v", err)
		}
	}
	rc, err := s.Open(t.Context(), b.SHA256, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if string(got) != "hello" {
		t.Fatalf("adopted blob holds %q", got)
	}
	if err := s.Adopt(t.Context(), stage("hell"), b); !errors.Is(err, artifact.ErrSize) {
		t.Fatalf("Adopt of a short file: %v, want ErrSize", err)
	}
	if left, _ := os.ReadDir(s.StageDir()); len(left) != 0 {
		t.Fatalf("staged files left behind: %v", left)
	}
}
