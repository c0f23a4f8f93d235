package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/codetree"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func paths(s *snapshot) []string {
	var out []string
	for _, f := range s.m.Files {
		out = append(out, f.Path+":"+f.Mode)
	}
	return out
}

func TestPackTree_Git(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.py": "a", "exp/b.py": "b", "gone.py": "g", ".gitignore": "*.log\nout/\n",
		"x.log": "ignored", "out/o": "ignored", "new.py": "untracked"})
	if err := os.Chmod(filepath.Join(root, "a.py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../a.py", filepath.Join(root, "exp", "link")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "a.py", "exp", "gone.py", ".gitignore"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	if err := os.Remove(filepath.Join(root, "gone.py")); err != nil {
		t.Fatal(err)
	}
	s, err := packTree(context.Background(), filepath.Join(root, "exp"), codetree.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".gitignore:100644", "a.py:100755", "exp/b.py:100644", "exp/link:120000", "new.py:100644"}
	if got := paths(s); !slices.Equal(got, want) || s.subdir != "exp" || !s.git {
		t.Fatalf("packed %v subdir %q; want %v in exp", got, s.subdir, want)
	}
	// Over the limits: refused with the largest files and a hint.
	_, err = packTree(context.Background(), root, codetree.Limits{MaxBytes: 4, MaxFiles: 100})
	if err == nil || !strings.Contains(err.Error(), "CODE_MAX_MB") || !strings.Contains(err.Error(), ".gitignore") ||
		!strings.Contains(err.Error(), "new.py") {
		t.Fatalf("over the limit: %v", err)
	}
}

func TestPackTree_RlschedIgnoreAndBadLinks(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"train.py": "t", "data/big.bin": "d", "ckpt.pt": "c", "src/m.py": "m",
		".rlschedignore": "data/\n*.pt\n"})
	s, err := packTree(context.Background(), root, codetree.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".rlschedignore:100644", "src/m.py:100644", "train.py:100644"}
	if got := paths(s); !slices.Equal(got, want) || s.git {
		t.Fatalf("packed %v; want %v", got, want)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "src", "out")); err != nil {
		t.Fatal(err)
	}
	if _, err := packTree(context.Background(), root, codetree.DefaultLimits); err == nil || !strings.Contains(err.Error(), `"src/out" points outside`) {
		t.Fatalf("a symlink out of the tree: %v", err)
	}
}

// A tree far over the limits is refused before its files are read: a
// 5 GiB file (sparse, so the test writes nothing) is named with its size,
// and the walk of a directory of too many files stops past the limit.
func TestPackTree_OverTheLimits(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"train.py": "t", "data/small.txt": "s"})
	f, err := os.Create(filepath.Join(root, "data", "huge.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(5 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = packTree(context.Background(), root, codetree.DefaultLimits)
	if err == nil || !strings.Contains(err.Error(), "CODE_MAX_MB") || !strings.Contains(err.Error(), "5.0 GiB  data/huge.bin") ||
		!strings.Contains(err.Error(), "5.0 GiB  data/") || !strings.Contains(err.Error(), rlschedIgnore) {
		t.Fatalf("a 5 GiB file: %v", err)
	}

	many := t.TempDir()
	files := map[string]string{}
	for i := range 40 {
		files[fmt.Sprintf("d%d/f%d", i%4, i)] = "x"
	}
	writeTree(t, many, files)
	if _, err := packTree(context.Background(), many, codetree.Limits{MaxBytes: 1 << 20, MaxFiles: 5}); err == nil ||
		!strings.Contains(err.Error(), "more than 5 files") || !strings.Contains(err.Error(), "CODE_MAX_FILES") {
		t.Fatalf("too many files: %v", err)
	}
}

// A file that changes while it is packed makes the pack start over, so the
// snapshot holds one version of it, whole; a file that changes at every
// try is refused, named.
func TestPackTree_ChangedWhilePacked(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"a.py": "v1", "b.py": "b"})
	a := filepath.Join(root, "a.py")
	edits := 0
	t.Cleanup(func() { packedHook = nil })
	packedHook = func(p string) {
		if p == a && edits == 0 {
			edits++
			if err := os.WriteFile(a, []byte("version 2"), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	s, err := packTree(context.Background(), root, codetree.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if f := s.m.Files[0]; f.Path != "a.py" || f.Size != 9 || f.SHA256 != sha256Hex("version 2") {
		t.Fatalf("a.py packed as %+v; want the bytes written during the first try", f)
	}
	packedHook = func(p string) {
		if p == a {
			edits++
			if err := os.WriteFile(a, []byte(strings.Repeat("x", edits)), 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := packTree(context.Background(), root, codetree.DefaultLimits); err == nil ||
		!strings.Contains(err.Error(), "a.py changed while it was packed 3 times") {
		t.Fatalf("a file changing at every try: %v", err)
	}
}

func sha256Hex(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }

// A file the submitter cannot read is refused, named, with the fix. Root
// reads every file, so the pack runs on a thread without the capabilities
// that let it (the thread ends with the goroutine).
func TestPackTree_UnreadableFile(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"train.py": "t", "secret/key.pem": "k"})
	if err := os.Chmod(filepath.Join(root, "secret", "key.pem"), 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		if os.Geteuid() == 0 {
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				done <- err
				return
			}
			data[0].Effective &^= 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_DAC_READ_SEARCH
			if err := unix.Capset(&hdr, &data[0]); err != nil {
				done <- err
				return
			}
		}
		_, err := packTree(context.Background(), root, codetree.DefaultLimits)
		done <- err
	}()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "cannot pack secret/key.pem") || !strings.Contains(err.Error(), "permission denied") ||
		!strings.Contains(err.Error(), "list them in "+rlschedIgnore) {
		t.Fatalf("an unreadable file: %v", err)
	}
}
