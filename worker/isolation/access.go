package isolation

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// need is the access a run's uid needs to the last element of a path; every
// directory on the way needs search (x) permission.
type need int

const (
	needExec   need = iota // a program: x, and r when it is a #! script
	needRead               // a file the run opens (a built-in script)
	needSearch             // a directory the run enters (its working directory)
)

// maxShebangDepth bounds how many #! interpreters canAccess follows.
const maxShebangDepth = 4

// canAccess reports why uid:gid (with no supplementary groups: runs get
// none) cannot reach path with the access n, or nil. It reads mode bits:
// the kernel has the last word (a POSIX ACL may grant more, a read-only or
// noexec mount deny more), so nil means "the modes allow it", and an element
// that carries an ACL is left to the kernel. path must be absolute.
func canAccess(path string, uid, gid uint32, n need) error {
	return canAccessDepth(path, uid, gid, n, 0)
}

func canAccessDepth(path string, uid, gid uint32, n need, depth int) error {
	if err := canTraverse(path, uid, gid); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return err
	}
	if real != path {
		// The directories the symlinks lead through are traversed too.
		if err := canTraverse(real, uid, gid); err != nil {
			return err
		}
	}
	st, err := os.Stat(real)
	if err != nil {
		return err
	}
	mode := st.Mode()
	switch n {
	case needSearch:
		if !mode.IsDir() {
			return fmt.Errorf("%s is not a directory", path)
		}
		return permits(real, st, uid, gid, 1, "enter")
	case needRead:
		return permits(real, st, uid, gid, 4, "read")
	}
	if !mode.IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if err := permits(real, st, uid, gid, 1, "execute"); err != nil {
		return err
	}
	interp, ok := shebang(real)
	if !ok {
		return nil
	}
	// The kernel runs the interpreter with the script as an argument: the
	// script must be readable, and the interpreter executable.
	if err := permits(real, st, uid, gid, 4, "read"); err != nil {
		return err
	}
	if depth >= maxShebangDepth || !filepath.IsAbs(interp) {
		return nil
	}
	if err := canAccessDepth(interp, uid, gid, needExec, depth+1); err != nil {
		return fmt.Errorf("its interpreter %s: %w", interp, err)
	}
	return nil
}

// canTraverse checks search permission on every directory above path.
func canTraverse(path string, uid, gid uint32) error {
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if err := permits(dir, st, uid, gid, 1, "enter"); err != nil {
			return err
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

// permits checks one permission bit (4 read, 1 execute/search) of st for
// uid:gid, in the owner, group or other class as the kernel picks it.
func permits(path string, st fs.FileInfo, uid, gid uint32, bit fs.FileMode, verb string) error {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	perm := st.Mode().Perm()
	var have fs.FileMode
	switch {
	case sys.Uid == uid:
		have = perm >> 6 & 7
	case sys.Gid == gid:
		have = perm >> 3 & 7
	default:
		have = perm & 7
	}
	if have&bit != 0 || hasACL(path) {
		return nil
	}
	if st.IsDir() {
		return fmt.Errorf("%s is mode %04o", path, perm)
	}
	return fmt.Errorf("%s is mode %04o: it cannot %s it", path, perm, verb)
}

// shebang returns the interpreter a "#!" script names.
func shebang(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	buf := make([]byte, 256)
	n, _ := f.Read(buf)
	line, ok := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !ok {
		return "", false
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	f2 := strings.Fields(string(line))
	if len(f2) == 0 {
		return "", false
	}
	return f2[0], true
}

// errNotFound mirrors exec's message for a program missing from PATH.
func errNotFound(name string) error {
	return fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// Unreachable is LookPath's error for a program on the run's PATH that its
// uid cannot execute: the worker's own lookup would pick Path, so a
// program further on (a system python3 for pyenv's) would be another
// interpreter than the one the submitter meant (issue 27). The caller may
// use the interpreter the operator configured (RUN_PYTHON) instead, and
// says so in the run's log.
type Unreachable struct {
	Name, Path string
	ID         *Identity
	Why        error
}

func (e *Unreachable) Error() string {
	fix := fmt.Sprintf("make it reachable by that uid (install %s where every user can run it, e.g. /usr/bin/%s)", e.Name, e.Name)
	if IsPythonName(e.Name) {
		fix += `, set RUN_PYTHON on the worker to an interpreter every user can run, or give the run a Python environment (--venv DIR or --requirements FILE)`
	}
	return fmt.Sprintf("%s resolves to %s, which %s cannot execute: %v; %s", e.Name, e.Path, e.ID, e.Why, fix)
}

// IsPythonName: a bare name RUN_PYTHON stands in for (python, python3,
// python3.11).
func IsPythonName(name string) bool {
	rest, ok := strings.CutPrefix(name, "python")
	if !ok {
		return false
	}
	if rest == "" || rest == "3" {
		return true
	}
	minor, ok := strings.CutPrefix(rest, "3.")
	return ok && minor != "" && strings.Trim(minor, "0123456789") == ""
}

// LookPath resolves argv[0] the way the worker's own lookup would, then
// checks that the run's uid can execute what it found: a name with a slash
// is taken as is (relative to dir, the run's working directory); a bare
// name is searched in the run's PATH, absolute entries only. For a run
// under its own uid (id != nil) the first program found must be one that
// uid can execute, else the error is an *Unreachable: never another
// program of that name further on, which would run silently in its place.
func LookPath(name, pathEnv, dir string, id *Identity) (string, error) {
	if strings.Contains(name, "/") {
		if id == nil {
			return name, nil // exec reports what is wrong
		}
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := canAccess(p, id.uid, id.gid, needExec); err != nil {
			return "", fmt.Errorf("%s cannot be run by %s: %w; make it executable by every user", name, id, err)
		}
		return name, nil
	}
	seen := map[string]bool{}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) || seen[d] {
			continue // a relative PATH entry would depend on the run's cwd
		}
		seen[d] = true
		c := filepath.Join(d, name)
		if st, err := os.Stat(c); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			continue
		}
		if id == nil {
			return c, nil
		}
		if err := canAccess(c, id.uid, id.gid, needExec); err != nil {
			return "", &Unreachable{Name: name, Path: c, ID: id, Why: err}
		}
		return c, nil
	}
	return "", errNotFound(name)
}

// hasACL reports whether path carries a POSIX access ACL.
func hasACL(path string) bool {
	_, err := getxattrSize(path, "system.posix_acl_access")
	return err == nil
}

var errNoXattr = errors.New("no xattr support")

// nobodyID stands for any uid a run may get: one that owns nothing on the
// way and is in none of its groups, so only the "other" bits let it in.
const nobodyID = 65534

// UnreachablePython reports, for `rlsched up` as root, the python3 that
// the first on pathEnv is and that runs under their own uids could not
// execute (a pyenv under /root), and the first python3 further on
// pathEnv, or in /usr/bin, that they could: up makes that one its
// workers' RUN_PYTHON, which every such run's log then names. Both are ""
// when the first python3 is reachable, or none is found.
func UnreachablePython(pathEnv string) (unreachable, fallback string) {
	first, err := LookPath("python3", pathEnv, "", nil)
	if err != nil || canAccess(first, nobodyID, nobodyID, needExec) == nil {
		return "", ""
	}
	for _, d := range append(filepath.SplitList(pathEnv), "/usr/bin") {
		if !filepath.IsAbs(d) {
			continue
		}
		c := filepath.Join(d, "python3")
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && canAccess(c, nobodyID, nobodyID, needExec) == nil {
			return first, c
		}
	}
	return first, ""
}
