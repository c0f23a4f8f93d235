package cli

import (
	"os"
	"path/filepath"

	"github.com/rlsched/rlsched/core"
)

// definePython adds --requirements and --venv, the run's Python
// environment (issue 27; API.md "Python environments").
func (rf *runFlags) definePython(fs *flagSet) {
	fs.StringVar(&rf.requirements, "requirements", "", "build the run a venv from `FILE` (pip requirements) of its code, relative to the run's working directory; the worker caches it")
	fs.StringVar(&rf.venv, "venv", "", "run in the existing venv `DIR` on the worker (absolute)")
}

// pythonEnv sets req.Python from --requirements or --venv. A requirements
// file is named relative to the run's working directory (the current one,
// or --workdir), as the worker reads it; one given from the current
// directory must exist there.
func (inv *invocation) pythonEnv(fs *flagSet, rf *runFlags, req *submitRequest) (int, bool) {
	reqSet, venvSet := fs.isSet("requirements"), fs.isSet("venv")
	switch {
	case reqSet && venvSet:
		return inv.usageError("give --requirements or --venv, not both"), false
	case venvSet:
		req.Python = &core.PythonEnv{Venv: rf.venv}
	case reqSet:
		base := req.Workdir
		if base == "" {
			base = inv.env.Dir
		}
		rel := rf.requirements
		if filepath.IsAbs(rel) {
			r, err := filepath.Rel(base, rel)
			if err != nil || !filepath.IsLocal(r) {
				return inv.usageError("--requirements %s is outside the run's working directory %s: name a file of its code", rel, base), false
			}
			rel = r
		} else if !filepath.IsLocal(rel) {
			return inv.usageError("--requirements %s is outside the run's working directory %s: name a file of its code", rel, base), false
		}
		if base == inv.env.Dir {
			if _, err := os.Stat(filepath.Join(base, rel)); err != nil {
				return inv.usageError("--requirements: %v", err), false
			}
		}
		req.Python = &core.PythonEnv{Requirements: filepath.ToSlash(filepath.Clean(rel))}
	default:
		return ExitOK, true
	}
	if err := req.Python.Check(); err != nil {
		return inv.usageError("%v", err), false
	}
	return ExitOK, true
}

// pythonLine is show's line for a run's Python environment.
func pythonLine(e *core.PythonEnv) string {
	switch {
	case e == nil:
		return "-"
	case e.Venv != "":
		return "venv " + e.Venv
	}
	return "requirements " + e.Requirements
}
