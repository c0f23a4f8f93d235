package worker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/internal/clip"
)

// A data dir belongs to one live worker at a time, and gives it its
// identity. Two workers on one dir would delete each other's spool, share
// output dirs and, under one id, take each other's place on the master at
// every Hello (issue 11). So the worker holds an exclusive flock on
// DataDir/lock for its whole life (the kernel drops it when the process
// dies, however it dies; the file stays), and keeps in the dir, made on its
// first start:
//
//   - instance: a random token sent in Hello.instance. A worker restarted on
//     the same dir is the same instance, so its Hello replaces its own stale
//     session at once; another worker under the same id is not, and the
//     master refuses it while the first is connected.
//   - id-suffix: the short random part of the default id, host-suffix, so
//     that workers started with default flags on one host in their own dirs
//     get distinct ids.

const (
	lockFile     = "lock"
	instanceFile = "instance"
	suffixFile   = "id-suffix"
	instanceLen  = 16 // bytes of randomness, hex-encoded
	suffixLen    = 3  // 6 hex digits: a collision among 100 workers of one host name is ~0.03%
)

// dataDir is a locked data dir and the identity kept in it.
type dataDir struct {
	lock     *os.File // holds the flock; closing it releases the dir
	instance string
	suffix   string
}

// lockDataDir creates dir if needed, takes its lock, and reads (or makes,
// on the first start) the identity kept there. It fails at once when
// another process holds the lock.
func lockDataDir(dir string) (*dataDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, lockFile)
	// 0600: runs may traverse the dir (0711) but have no business reading
	// the worker's identity.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	_ = f.Chmod(0o600) // an older worker made it 0644
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another worker"
			if pid := lockHolder(f); pid > 0 {
				holder += " (pid " + strconv.Itoa(pid) + ")"
			}
			return nil, fmt.Errorf("cannot start worker: data dir %s is in use by %s; "+
				"give each worker on this machine its own --data-dir", dir, holder)
		}
		return nil, fmt.Errorf("cannot lock %s: %w", path, err)
	}
	d := &dataDir{lock: f}
	// The pid in the file only names the holder in the message above; the
	// lock is the flock, so a stale pid left by a dead worker is harmless.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if d.instance, err = persistedToken(filepath.Join(dir, instanceFile), instanceLen); err != nil {
		d.close()
		return nil, err
	}
	if d.suffix, err = persistedToken(filepath.Join(dir, suffixFile), suffixLen); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// lockHolder returns the pid holding the flock on f, 0 when it cannot tell:
// from /proc/locks, which the kernel updates with the lock, else from the
// pid the holder wrote into the file (it may not have yet, or may be a
// previous holder's).
func lockHolder(f *os.File) int {
	if fi, err := f.Stat(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			if pid := flockHolder(st); pid > 0 {
				return pid
			}
		}
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// flockHolder finds the holder of a FLOCK on the file st describes in
// /proc/locks, whose lines read "1: FLOCK  ADVISORY  WRITE <pid>
// <major>:<minor>:<inode> 0 EOF" (major and minor in hex).
func flockHolder(st *syscall.Stat_t) int {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0
	}
	dev := uint64(st.Dev)
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), st.Ino)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want { // "->" lines are waiters
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// close releases the dir.
func (d *dataDir) close() {
	if d != nil {
		d.lock.Close()
	}
}

// persistedToken returns the hex token of n random bytes kept in path,
// creating it when the file does not exist. Caller holds the dir's lock.
func persistedToken(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		tok := strings.TrimSpace(string(b))
		if _, herr := hex.DecodeString(tok); herr != nil || len(tok) != 2*n {
			return "", fmt.Errorf("cannot use %s: want %d hex digits, found %q; delete the file and the worker makes a new one",
				path, 2*n, clip.String(tok, 80))
		}
		return tok, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("cannot read %s: %w", path, err)
	}
	raw := make([]byte, n)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("cannot make a random token for %s: %w", path, err)
	}
	tok := hex.EncodeToString(raw)
	// Written whole or not at all: a crash mid-write leaves no half token.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("cannot write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("cannot create %s: %w", path, err)
	}
	return tok, nil
}

var nonIDChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// defaultID is the id of a worker started without one: its host name made
// a valid id, a dash and the data dir's suffix (myhost-3f9a2c).
func defaultID(host, suffix string) string {
	h := strings.Trim(nonIDChars.ReplaceAllString(host, "-"), "-")
	if h == "" {
		h = "worker"
	}
	return h[:min(len(h), 64-1-len(suffix))] + "-" + suffix
}
