package core

import (
	"fmt"
	"path"
	"strings"
)

// maxPythonPathBytes bounds PythonEnv's paths.
const maxPythonPathBytes = 1024

// PythonEnv is a run's Python environment (issue 27; API.md "Python
// environments"), exactly one of: Requirements, a file of the run's working
// directory (its code snapshot, or workdir) the worker builds a venv from
// and caches; Venv, an existing venv on the worker. Fixed at submission.
type PythonEnv struct {
	Requirements string `json:"requirements,omitempty"`
	Venv         string `json:"venv,omitempty"`
}

// Check says what is wrong with e, naming the field (python.requirements,
// python.venv) as a 400 does; nil when e is nil or valid. The submission's
// check and the worker's are this one.
func (e *PythonEnv) Check() error {
	if e == nil {
		return nil
	}
	switch {
	case e.Requirements == "" && e.Venv == "":
		return fmt.Errorf(`python must name one of "requirements" (a file of the run's code) or "venv" (an existing venv on the worker)`)
	case e.Requirements != "" && e.Venv != "":
		return fmt.Errorf(`python names both "requirements" and "venv"; give one`)
	}
	for name, p := range map[string]string{"python.requirements": e.Requirements, "python.venv": e.Venv} {
		if len(p) > maxPythonPathBytes || strings.ContainsAny(p, "\x00\n\r") {
			return fmt.Errorf("%s must be at most %d bytes, without NUL or newlines", name, maxPythonPathBytes)
		}
	}
	if r := e.Requirements; r != "" {
		if path.IsAbs(r) || strings.HasPrefix(r, "~") {
			return fmt.Errorf("python.requirements %q must be a path relative to the run's working directory (its code), e.g. requirements.txt", r)
		}
		for _, el := range strings.Split(r, "/") {
			if el == ".." {
				return fmt.Errorf("python.requirements %q must not contain \"..\": name a file of the run's code", r)
			}
		}
	}
	if v := e.Venv; v != "" && !path.IsAbs(v) {
		return fmt.Errorf("python.venv %q must be an absolute path on the worker, e.g. /shared/envs/x", v)
	}
	return nil
}
