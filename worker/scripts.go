package worker

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/rlsched/rlsched/scripts"
)

const scriptsPrefix = "@scripts/"

// materialiseScripts writes scripts.FS into dir (atomically per file, so
// workers sharing a data dir never see a half-written script) and returns dir.
// The files are the worker's, mode 0755: every run's uid may read and run
// them, none may change them.
func materialiseScripts(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create scripts dir: %w", err)
	}
	err := fs.WalkDir(scripts.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := fs.ReadFile(scripts.FS, p)
		if err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+d.Name()+"-*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(data)
		cerr := tmp.Close()
		if werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Chmod(tmp.Name(), 0o755)
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), dst)
		}
		if werr != nil {
			os.Remove(tmp.Name())
		}
		return werr
	})
	if err != nil {
		return "", fmt.Errorf("cannot materialise scripts into %s: %w", dir, err)
	}
	return dir, nil
}

// resolveScript maps "@scripts/train.py" to its materialised path. Other
// arguments come back unchanged. A name outside scripts.FS is an error.
func resolveScript(dir, arg string) (string, error) {
	name, ok := strings.CutPrefix(arg, scriptsPrefix)
	if !ok {
		return arg, nil
	}
	if !fs.ValidPath(name) || name == "." || path.Clean(name) != name {
		return "", fmt.Errorf("invalid script name %q", arg)
	}
	if st, err := fs.Stat(scripts.FS, name); err != nil || st.IsDir() {
		return "", fmt.Errorf("no script %q is shipped with this worker", arg)
	}
	return filepath.Join(dir, filepath.FromSlash(name)), nil
}
