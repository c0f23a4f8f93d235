package isolation

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestCaches_TrimAndHold: past its cap the least recently used files go;
// one live run of a user holds the dir, a second gets none.
func TestCaches_TrimAndHold(t *testing.T) {
	c, err := NewCaches(t.TempDir(), 1, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	dir, release := c.Acquire("alice", nil)
	if dir == "" {
		t.Fatal("no cache dir")
	}
	if d2, _ := c.Acquire("alice", nil); d2 != "" {
		t.Fatal("a second live run of the user got the dir")
	}
	now := time.Now()
	for i, name := range []string{"old", "mid", "new"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 600<<10), 0o600); err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(i-3) * time.Hour)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	release()
	for name, want := range map[string]bool{"old": false, "mid": false, "new": true} {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s kept: %v, want %v", name, err == nil, want)
		}
	}
	if d, _ := c.Acquire("alice", nil); d != dir {
		t.Fatalf("after release: %q", d)
	}
	if d, _ := c.Acquire("not a user!", nil); d != "" {
		t.Fatalf("an invalid user got %q", d)
	}
}
