package worker

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"

	"github.com/rlsched/rlsched/internal/clip"
)

// A run's last line of output, kept by its pump so that a failure the
// worker can name (a missing Python module) is said in the run's own log
// and error, not only in the errorTail the master keeps (decisions.md,
// issue 32). stdout and stderr share the pipe and PYTHONUNBUFFERED is set,
// so Python's traceback is the last of it.

// lastLineBytes bounds what is kept of one line: the start of a line is
// what a recogniser reads.
const lastLineBytes = 512

// lastOutput keeps the last non-blank line written to it, its first
// lastLineBytes. It is the pump's: not safe for concurrent use.
type lastOutput struct {
	cur  []byte // the line being written, its first lastLineBytes
	last string // the last complete non-blank line
}

func (l *lastOutput) Write(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if room := lastLineBytes - len(l.cur); room > 0 {
			l.cur = append(l.cur, part[:min(room, len(part))]...)
		}
		if i < 0 {
			return
		}
		if s := strings.TrimRight(string(l.cur), "\r"); strings.TrimSpace(s) != "" {
			l.last = s
		}
		l.cur, p = l.cur[:0], p[i+1:]
	}
}

// String is the last non-blank line, an unended one included.
func (l *lastOutput) String() string {
	if s := strings.TrimRight(string(l.cur), "\r"); strings.TrimSpace(s) != "" {
		return s
	}
	return l.last
}

// moduleNameBytes bounds the module name quoted in a hint.
const moduleNameBytes = 100

// missingModule is the module a Python traceback's last line says cannot
// be imported: `ModuleNotFoundError: No module named 'a.b'` (Python 3,
// with or without "; 'a' is not a package" after it) or `ImportError: No
// module named a.b` (Python 2, and 3 before 3.6 with quotes). ok is false
// for any other line.
func missingModule(line string) (mod, kind string, ok bool) {
	line = strings.TrimSpace(line)
	for _, k := range []string{"ModuleNotFoundError", "ImportError"} {
		rest, found := strings.CutPrefix(line, k+": No module named ")
		if !found {
			continue
		}
		if q := rest[:min(len(rest), 1)]; q == "'" || q == `"` {
			end := strings.Index(rest[1:], q)
			if end < 0 {
				return "", "", false
			}
			rest = rest[1 : 1+end]
		} else if i := strings.IndexAny(rest, " ;"); i >= 0 {
			rest = rest[:i]
		}
		mod = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) || r == unicode.ReplacementChar {
				return -1
			}
			return r
		}, rest)
		if mod == "" {
			return "", "", false
		}
		return clip.String(mod, moduleNameBytes), k, true
	}
	return "", "", false
}

// missingModuleHint is the sentence for a run whose last line of output
// says a module is missing, "" for any other.
func missingModuleHint(line string) string {
	mod, kind, ok := missingModule(line)
	if !ok {
		return ""
	}
	return fmt.Sprintf(`the run's Python cannot import %s (%s); add it to the run's requirements ("python": {"requirements": "requirements.txt"}, or --requirements) or run it in a venv that has it (--venv)`, mod, kind)
}
