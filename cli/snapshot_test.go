package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
