package testsvc

// Private service instances for tests that kill, restart or flush a service.
// The shared servers of RequireRedis and RequireMySQL belong to every test
// running at once, so a test that stops one would break the others; these
// helpers start a server of the test's own, on a free port, and stop it in
// t.Cleanup.
//
// Usage:
//
//	r := testsvc.StartRedis(t)   // r.Addr() is "127.0.0.1:PORT"
//	r.Stop(); r.Start()          // comes back empty: nothing is saved
//	r.Flush()                    // FLUSHALL without a restart
//
//	m := testsvc.StartMariaDB(t) // m.DSN() is "root@tcp(127.0.0.1:PORT)/rlsched"
//	m.Stop(); m.Start()          // data survives; the port stays the same
//
// A missing binary skips the test, or fails it under CI=true, like Require*.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	// readyTimeout bounds how long a started server may take to answer.
	readyTimeout = 60 * time.Second
	// stopTimeout bounds a clean shutdown (SIGTERM) before SIGKILL.
	stopTimeout = 30 * time.Second
	// MariaDBDatabase is the database every StartMariaDB instance has.
	MariaDBDatabase = "rlsched"
)

// server is one restartable child process listening on a fixed port.
type server struct {
	t    testing.TB
	name string
	port int
	args func() []string // binary and arguments, given the port
	logf string          // stdout and stderr of every start, appended
	// ready polls the server once; nil means it answers.
	ready func(addr string) error

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
}

func (s *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs the server and waits until it answers; it fails t otherwise.
func (s *server) start() {
	s.t.Helper()
	if err := s.tryStart(); err != nil {
		s.t.Fatalf("testsvc: %v", err)
	}
}

func (s *server) tryStart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("%s on %s: Start while it runs", s.name, s.addr())
	}
	out, err := os.OpenFile(s.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	argv := s.args()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group (a terminal's ^C goes to the test only, which then
	// stops the server cleanly); dies with the test binary if that crashes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", s.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done

	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.ready(s.addr())
		if err == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("%s exited before answering on %s (%v); its output:\n%s",
				s.name, s.addr(), cmd.ProcessState, tailFile(s.logf, 30))
		default:
		}
		if time.Now().After(deadline) {
			s.stopLocked(syscall.SIGKILL)
			return fmt.Errorf("%s did not answer on %s within %v (%v); its output:\n%s",
				s.name, s.addr(), readyTimeout, err, tailFile(s.logf, 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends sig and waits until the process is reaped; after stopTimeout
// it escalates to SIGKILL. Stopping a stopped server does nothing.
func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(sig)
}

func (s *server) stopLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(stopTimeout):
		s.t.Errorf("testsvc: %s on %s ignored %v for %v; killing it", s.name, s.addr(), sig, stopTimeout)
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// newServer prepares s on a free port and starts it; a start that fails
// because another process took the port in the meantime is retried on a
// new one.
func newServer(t testing.TB, s *server) {
	t.Helper()
	var err error
	for try := 0; try < 3; try++ {
		s.port = freePort(t)
		if err = s.tryStart(); err == nil {
			t.Cleanup(func() { s.stop(syscall.SIGTERM) })
			return
		}
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	t.Fatalf("testsvc: %v", err)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testsvc: no free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// findBinary returns the first of names found in PATH or in dirs; when none
// is, it skips t, or fails it under CI=true.
func findBinary(t testing.TB, what string, names []string, dirs ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
		for _, d := range dirs {
			p := filepath.Join(d, n)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p
			}
		}
	}
	msg := fmt.Sprintf("%s is not installed (none of %s in PATH or %s); install it to run this test",
		what, strings.Join(names, ", "), strings.Join(dirs, ", "))
	if os.Getenv("CI") == "true" {
		t.Fatal("testsvc: CI=true needs a private " + msg)
	}
	t.Skip("testsvc: " + msg)
	return ""
}

func tailFile(path string, lines int) string {
	b, _ := os.ReadFile(path)
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// ---- Redis ----

// Redis is a private redis-server of one test. It keeps nothing on disk, so
// a restarted instance starts empty (as a production Redis without
// persistence would after a crash).
type Redis struct {
	s   *server
	dir string // everything the server writes is in here
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 and stops it
// when t ends. extra are more redis-server arguments; they override the
// defaults (e.g. "--maxmemory-policy", "allkeys-lru").
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	bin := findBinary(t, "Redis server", []string{"redis-server"}, "/usr/bin", "/usr/local/bin", "/usr/sbin")
	dir := t.TempDir()
	r := &Redis{dir: dir}
	r.s = &server{t: t, name: "redis-server", logf: filepath.Join(dir, "redis.log"), ready: redisPing}
	r.s.args = func() []string {
		// Every path the server could write (working dir, pid file) is in
		// the instance's own dir; no unix socket.
		a := []string{bin, "--port", strconv.Itoa(r.s.port), "--bind", "127.0.0.1", "--save", "",
			"--appendonly", "no", "--dir", dir, "--pidfile", filepath.Join(dir, "redis.pid"), "--unixsocket", "",
			"--protected-mode", "no", "--daemonize", "no", "--maxmemory-policy", "noeviction"}
		return append(a, extra...) // a later directive wins
	}
	newServer(t, r.s)
	return r
}

// Addr is host:port of the instance; it stays the same across restarts.
func (r *Redis) Addr() string { return r.s.addr() }

// Stop shuts the server down cleanly (SIGTERM) and waits until it exited.
func (r *Redis) Stop() { r.s.stop(syscall.SIGTERM) }

// Kill SIGKILLs the server, the way a crash would, and waits until it died.
func (r *Redis) Kill() { r.s.stop(syscall.SIGKILL) }

// Start starts a stopped server again on the same port; it comes back
// empty. It returns once the server answers PING.
func (r *Redis) Start() {
	r.s.t.Helper()
	r.s.start()
}

// Flush deletes every key of the running server (FLUSHALL).
func (r *Redis) Flush() {
	r.s.t.Helper()
	if err := redisCmd(r.Addr(), "FLUSHALL", "+OK"); err != nil {
		r.s.t.Fatalf("testsvc: FLUSHALL on %s: %v", r.Addr(), err)
	}
}

func redisPing(addr string) error { return redisCmd(addr, "PING", "+PONG") }

// redisCmd sends one inline command and expects the reply line want (a
// loading Redis answers -LOADING, which is not ready yet).
func redisCmd(addr, cmd, want string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got := strings.TrimRight(line, "\r\n"); got != want {
		return fmt.Errorf("%s answered %q", cmd, got)
	}
	return nil
}

// ---- MariaDB ----

// MariaDB is a private MariaDB server of one test, with a database
// MariaDBDatabase and a user root without password reachable over TCP.
// Its data directory lives in t.TempDir(), so data survives Stop/Start.
type MariaDB struct {
	s    *server
	dirs []string // everything the server writes is in one of these
}

// StartMariaDB initialises a data directory, starts mariadbd on a free port
// of 127.0.0.1 and stops it when t ends. It takes about a second or two.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	bin := findBinary(t, "MariaDB server", []string{"mariadbd", "mysqld"}, "/usr/sbin", "/usr/local/sbin", "/usr/libexec")
	install := findBinary(t, "MariaDB installer", []string{"mariadb-install-db", "mysql_install_db"}, "/usr/bin", "/usr/local/bin", "/usr/sbin")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// Every path the server writes is the instance's own: its temporary
	// tables (--tmpdir; the default /tmp is shared by every test package
	// running at once, and mariadb-install-db once failed there with
	// "Could not remove temporary table '/tmp/#sql-temptable-…'"), its
	// socket and its pid file. The installer gets them too: it runs the
	// server in bootstrap mode. A unix socket path must fit in 108 bytes;
	// t.TempDir() of a long test name may not, so the socket lives in a
	// short dir of its own.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "mdb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	paths := []string{"--tmpdir=" + tmp, "--socket=" + filepath.Join(sockDir, "s"),
		"--pid-file=" + filepath.Join(dir, "mariadbd.pid")}
	logf := filepath.Join(dir, "mariadb.log")
	asRoot := os.Geteuid() == 0

	args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal",
		"--skip-test-db", "--skip-name-resolve"}, paths...)
	if asRoot {
		args = append(args, "--user=root")
	}
	cmd := exec.Command(install, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testsvc: %s failed (%v):\n%s", install, err, out)
	}
	initSQL := filepath.Join(dir, "init.sql")
	if err := os.WriteFile(initSQL, []byte("CREATE DATABASE IF NOT EXISTS "+MariaDBDatabase+";\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	m := &MariaDB{dirs: []string{dir, sockDir}}
	m.s = &server{t: t, name: "mariadbd", logf: logf, ready: mysqlGreets}
	m.s.args = func() []string {
		a := append([]string{bin, "--no-defaults", "--datadir=" + data}, paths...)
		a = append(a, "--port="+strconv.Itoa(m.s.port), "--bind-address=127.0.0.1", "--skip-name-resolve",
			"--init-file="+initSQL, "--skip-log-bin", "--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
			"--performance-schema=OFF", "--max-connections=300", "--log-error="+logf)
		if asRoot {
			a = append(a, "--user=root") // mariadbd refuses to run as root without it
		}
		return a
	}
	newServer(t, m.s)
	return m
}

// DSN is a go-sql-driver DSN of the instance's database MariaDBDatabase as
// root; it stays the same across restarts.
func (m *MariaDB) DSN() string { return "root@tcp(" + m.s.addr() + ")/" + MariaDBDatabase }

// Addr is host:port of the instance.
func (m *MariaDB) Addr() string { return m.s.addr() }

// Stop shuts the server down cleanly (SIGTERM, InnoDB flushes) and waits
// until it exited; clients then get connection refused.
func (m *MariaDB) Stop() { m.s.stop(syscall.SIGTERM) }

// Kill SIGKILLs the server, the way a crash would; Start then recovers.
func (m *MariaDB) Kill() { m.s.stop(syscall.SIGKILL) }

// Start starts a stopped server again on the same port and data, and
// returns once it accepts logins.
func (m *MariaDB) Start() {
	m.s.t.Helper()
	m.s.start()
}

// mysqlGreets reports nil when the server sends its handshake packet
// (protocol 10); a server still starting sends none or an error packet.
func mysqlGreets(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var hdr [5]byte // 3 bytes length, 1 sequence, 1 first payload byte
	if _, err := readFull(c, hdr[:]); err != nil {
		return err
	}
	if hdr[4] != 10 {
		return errors.New("no protocol-10 handshake (server not ready)")
	}
	return nil
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
