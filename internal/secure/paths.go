package secure

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// EnsureDir makes dir a directory of this process's uid with exactly mode
// perm: it creates it (missing parents get 0755) or fixes the mode of an
// existing one. It refuses a directory another uid owns and one that is
// shared (sticky or world-writable): those are not rlsched's to change. It
// returns what it changed, for the caller to log, or "".
func EnsureDir(dir string, perm fs.FileMode) (string, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("cannot create %s: %w", filepath.Dir(dir), err)
	}
	switch err := os.Mkdir(dir, perm); {
	case err == nil:
		// Mkdir applies the umask: set the mode exactly.
		if err := os.Chmod(dir, perm); err != nil {
			return "", fmt.Errorf("cannot set %s to mode %o: %w", dir, perm, err)
		}
		return "", nil
	case !errors.Is(err, fs.ErrExist):
		return "", fmt.Errorf("cannot create %s: %w", dir, err)
	}
	st, err := ownStat(dir)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s is not a directory", dir)
	}
	if shared(st.Mode()) {
		return "", fmt.Errorf("%s is a shared directory (mode %s): give rlsched a directory of its own, e.g. mkdir -m %o %s",
			dir, modeString(st.Mode()), perm, filepath.Join(dir, "rlsched"))
	}
	if st.Mode().Perm() == perm && st.Mode()&(fs.ModeSetuid|fs.ModeSetgid) == 0 {
		return "", nil
	}
	if err := os.Chmod(dir, perm); err != nil {
		return "", fmt.Errorf("cannot set %s to mode %o: %w; run chmod %o %s", dir, perm, err, perm, dir)
	}
	return fmt.Sprintf("%s: mode %s → %o", dir, modeString(st.Mode()), perm), nil
}

// CheckPrivateDir refuses dir unless this uid owns it and nobody else may
// enter it (mode 0700 or stricter). It changes nothing: for a directory
// rlsched was pointed at but does not own by convention (the one holding a
// configured SQLITE_PATH). A missing dir is created with mode 0700.
func CheckPrivateDir(dir, what string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %w", dir, err)
	}
	st, err := ownStat(dir)
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s is in %s, which others can enter (mode %s): chmod 700 %s, or move %s into a directory only rlsched can enter",
			what, dir, modeString(st.Mode()), dir, what)
	}
	return nil
}

// TightenFile removes the permission bits beyond perm of an existing file
// this uid owns; a missing file is fine. It returns what it changed, or "".
func TightenFile(path string, perm fs.FileMode) (string, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if st, err = ownStat(path); err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if st.Mode().Perm()&^perm == 0 {
		return "", nil
	}
	if err := os.Chmod(path, st.Mode().Perm()&perm); err != nil {
		return "", fmt.Errorf("cannot set %s to mode %o: %w; run chmod %o %s", path, perm, err, perm, path)
	}
	return fmt.Sprintf("%s: mode %s → %o", path, modeString(st.Mode()), st.Mode().Perm()&perm), nil
}

// ownStat stats path and refuses it unless this process's uid owns it.
func ownStat(path string) (fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot check %s: %w", path, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s is owned by uid %d, but rlsched runs as uid %d: chown %d %s, or use another path",
			path, sys.Uid, os.Geteuid(), os.Geteuid(), path)
	}
	return st, nil
}

// shared reports a directory others may create entries in.
func shared(m fs.FileMode) bool { return m&fs.ModeSticky != 0 || m.Perm()&0o002 != 0 }

// modeString renders a mode the way chmod takes it (1777, 0755).
func modeString(m fs.FileMode) string {
	n := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	return fmt.Sprintf("%04o", n)
}
