package masterd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func perm(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestUpLayout_MovesEarlierState: up's data dir of before issue 12 (the
// master's state next to the workers' dirs, all 0755) becomes DIR/master
// (0700) beside DIR/workers (0711), with the state's contents intact.
func TestUpLayout_MovesEarlierState(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	for _, d := range []string{filepath.Join(dir, "logs"), filepath.Join(dir, "workers", "local-0", "outputs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"secrets.env": "JWT_SECRET=x\n", "rlsched.db": "db", "rlsched.db-wal": "wal", "logs/r1.log": "TRACE_ID:t\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	masterDir, workersDir, err := UpLayout(dir, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if masterDir != filepath.Join(dir, "master") || workersDir != filepath.Join(dir, "workers") {
		t.Fatalf("layout: %s, %s", masterDir, workersDir)
	}
	for name, body := range files {
		b, err := os.ReadFile(filepath.Join(masterDir, name))
		if err != nil || string(b) != body {
			t.Errorf("%s after the move: %q, %v", name, b, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("%s is still in the data dir runs pass through", name)
		}
	}
	for p, want := range map[string]os.FileMode{dir: 0o711, masterDir: 0o700, workersDir: 0o711} {
		if got := perm(t, p); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
	c := Config{DataDir: masterDir, SQLitePath: filepath.Join(masterDir, "rlsched.db"), LogDir: filepath.Join(masterDir, "logs")}
	if err := c.privatePaths(zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{filepath.Join(masterDir, "logs"): 0o700,
		filepath.Join(masterDir, "rlsched.db"): 0o600, filepath.Join(masterDir, "rlsched.db-wal"): 0o600} {
		if got := perm(t, p); got != want {
			t.Errorf("%s: mode %o, want %o", p, got, want)
		}
	}
	// A second start finds the new layout and moves nothing.
	if err := os.WriteFile(filepath.Join(dir, "secrets.env"), []byte("stray"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := UpLayout(dir, nil, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(masterDir, "secrets.env")); string(b) != files["secrets.env"] {
		t.Fatalf("a second start replaced the secrets: %q", b)
	}
}

// TestPrivatePaths_SQLiteElsewhere: a SQLITE_PATH outside the data dir must
// sit in a directory only rlsched can enter; rlsched refuses, changing
// nothing, and says how to fix it.
func TestPrivatePaths_SQLiteElsewhere(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "srv")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	c := Config{DataDir: filepath.Join(base, "data"), SQLitePath: filepath.Join(shared, "rlsched.db"), LogDir: filepath.Join(base, "data", "logs")}
	err := c.privatePaths(zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+shared) {
		t.Fatalf("SQLITE_PATH in a 0755 dir: %v", err)
	}
	if perm(t, shared) != 0o755 {
		t.Fatal("the directory of SQLITE_PATH was changed")
	}
	if err := os.Chmod(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.privatePaths(zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
}

// TestUpLayout_KeepsConfiguredPaths: a LOG_DIR set explicitly to the old
// place is not moved from under its owner.
func TestUpLayout_KeepsConfiguredPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets.env"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	masterDir, _, err := UpLayout(dir, map[string]bool{"logs": true}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs")); err != nil {
		t.Errorf("the configured LOG_DIR was moved: %v", err)
	}
	if _, err := os.Stat(filepath.Join(masterDir, "secrets.env")); err != nil {
		t.Errorf("secrets.env was not moved: %v", err)
	}
}

// TestPrivatePaths_NewDatabaseIs0600 (issue 25): on a first start the
// database and the files SQLite makes beside it are 0600 from the start,
// not the umask's 0644 until a restart tightens them.
func TestPrivatePaths_NewDatabaseIs0600(t *testing.T) {
	m := start(t, Config{})
	exercise(t, m, "memory") // writes, so the -wal and -shm files exist
	for _, suffix := range []string{"", "-wal", "-shm"} {
		p := m.SQLitePath() + suffix
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if got := perm(t, p); got != 0o600 {
			t.Errorf("%s is %o, want 600", p, got)
		}
	}
}
