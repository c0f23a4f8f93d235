package secure

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func mode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestEnsureDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "state")
	if changed, err := EnsureDir(dir, 0o700); err != nil || changed != "" {
		t.Fatalf("create: %q, %v", changed, err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Fatalf("new dir has mode %o, want 0700", m)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	changed, err := EnsureDir(dir, 0o700)
	if err != nil || !strings.Contains(changed, "0755 → 700") {
		t.Fatalf("tighten: %q, %v", changed, err)
	}
	if m := mode(t, dir); m != 0o700 {
		t.Fatalf("tightened dir has mode %o, want 0700", m)
	}
	// The exact mode, also where that means opening a directory up for
	// traversal (the worker's run-facing tree).
	if _, err := EnsureDir(dir, 0o711); err != nil || mode(t, dir) != 0o711 {
		t.Fatalf("0711: %v, mode %o", err, mode(t, dir))
	}

	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureDir(shared, 0o700); err == nil || !strings.Contains(err.Error(), "shared directory (mode 1777)") {
		t.Fatalf("sticky dir: %v, want a refusal", err)
	}
	if m, _ := os.Stat(shared); m.Mode()&fs.ModeSticky == 0 {
		t.Fatal("the shared directory's mode was changed")
	}

	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureDir(file, 0o700); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a file: %v", err)
	}
}

func TestEnsureDir_OtherOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another uid")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := EnsureDir(dir, 0o700)
	if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") || !strings.Contains(err.Error(), "chown 0 "+dir) {
		t.Fatalf("dir of another uid: %v", err)
	}
	if m := mode(t, dir); m != 0o755 {
		t.Fatalf("mode changed to %o", m)
	}
}

func TestCheckPrivateDir(t *testing.T) {
	base := t.TempDir()
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	err := CheckPrivateDir(base, "SQLITE_PATH x.db")
	if err == nil || !strings.Contains(err.Error(), "chmod 700 "+base) {
		t.Fatalf("open dir: %v", err)
	}
	if m := mode(t, base); m != 0o755 {
		t.Fatalf("CheckPrivateDir changed the mode to %o", m)
	}
	fresh := filepath.Join(base, "new")
	if err := CheckPrivateDir(fresh, "x"); err != nil || mode(t, fresh) != 0o700 {
		t.Fatalf("missing dir: %v", err)
	}
}

func TestTightenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rlsched.db")
	if changed, err := TightenFile(p, 0o600); err != nil || changed != "" {
		t.Fatalf("missing file: %q %v", changed, err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := TightenFile(p, 0o600); err != nil || changed == "" || mode(t, p) != 0o600 {
		t.Fatalf("0644 file: %q %v, mode %o", changed, err, mode(t, p))
	}
	if err := os.Chmod(p, 0o400); err != nil {
		t.Fatal(err)
	}
	if changed, err := TightenFile(p, 0o600); err != nil || changed != "" || mode(t, p) != 0o400 {
		t.Fatalf("a stricter mode must stay: %q %v, mode %o", changed, err, mode(t, p))
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, perm fs.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok", "  tok-123456789abcdef\n", 0o600)
	if s, err := ReadSecretFile(ok); err != nil || s != "tok-123456789abcdef" {
		t.Fatalf("0600 file: %q, %v", s, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadSecretFile(link); err != nil || s != "tok-123456789abcdef" {
		t.Fatalf("symlink to a 0600 file: %q, %v", s, err)
	}
	f := func(path, want string) {
		t.Helper()
		if s, err := ReadSecretFile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadSecretFile(%s) = %q, %v; want an error with %q", path, s, err, want)
		}
	}
	f(write("world", "tok", 0o644), "chmod 600")
	f(write("group", "tok", 0o640), "mode 0640")
	f(write("gw", "tok", 0o620), "chmod 600")
	f(write("empty", "\n \n", 0o600), "is empty")
	f(dir, "not a regular file")
	f(filepath.Join(dir, "missing"), "cannot open")
	if os.Geteuid() == 0 {
		p := write("theirs", "tok", 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		f(p, "owned by uid 65534")
	}
}

func TestScrubEnv(t *testing.T) {
	t.Setenv("JWT_SECRET", "x")
	t.Setenv("WORKER_JOIN_TOKEN", "y")
	t.Setenv("RLSCHED_KEEP", "z")
	ScrubEnv()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if IsSecretEnv(k) {
			t.Errorf("%s still in the environment", k)
		}
	}
	if os.Getenv("RLSCHED_KEEP") != "z" {
		t.Error("ScrubEnv removed a variable that is no secret")
	}
}

// envNoDumpChild makes the test binary a child that calls NoDump and then
// waits for its stdin to close.
const envNoDumpChild = "RLSCHED_TEST_NODUMP_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(envNoDumpChild); v != "" {
		if v == "nodump" {
			if err := NoDump(); err != nil {
				os.Exit(3)
			}
		}
		os.Stdout.WriteString("ready\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestNoDump: a process of the same uid reads the environment of a child
// that did not call NoDump, and not that of one that did.
func TestNoDump(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run both processes under an unprivileged uid (root may read any /proc entry)")
	}
	const uid = 65534 // nobody: an unprivileged uid every Linux has
	exe := reachableCopy(t)
	cred := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	readable := func(mode string) (bool, string) {
		child := exec.Command(exe)
		child.Env = append(os.Environ(), envNoDumpChild+"="+mode, "SECRET_MARK=s3cret")
		child.SysProcAttr = cred
		in, err := child.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatalf("cannot start the child as uid %d: %v", uid, err)
		}
		defer func() { in.Close(); _ = child.Wait() }()
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("child: %q %v", line, err)
		}
		peer := exec.Command("cat", filepath.Join("/proc", strconv.Itoa(child.Process.Pid), "environ"))
		peer.SysProcAttr = cred
		b, err := peer.CombinedOutput()
		return err == nil && strings.Contains(string(b), "SECRET_MARK=s3cret"), string(b)
	}
	if ok, out := readable("dumpable"); !ok {
		t.Fatalf("control: a same-uid peer cannot read a dumpable process's environ (%q); the test proves nothing here", out)
	}
	if ok, _ := readable("nodump"); ok {
		t.Fatal("a same-uid peer read the environment of a process that called NoDump")
	}
}

// reachableCopy copies the test binary where every uid can run it: its own
// build directory is private to root.
func reachableCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "secure.test")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
