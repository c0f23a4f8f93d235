package core

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxArtifactPath is the longest artifact path, in bytes (API.md).
const MaxArtifactPath = 1024

// Artifact is one stored version of a file of a run's output dir: the
// index row that names a blob of the artifact store (artifact). A run
// keeps the newest version of each path per attempt.
type Artifact struct {
	TaskID  string `json:"-"`
	Attempt int    `json:"attempt"`
	// Path is relative to RLSCHED_OUTPUT_DIR, "/"-separated (CheckArtifactPath).
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// ModifiedAt is the file's mtime on the worker when it was read.
	ModifiedAt time.Time `json:"modifiedAt"`
}

// Warning is something a run's record says about it beyond its status:
// outputs not kept, a GPU taken by a foreign process. Codes are API.md's
// (WarnArtifactLimit, WarnArtifactError, and the GPU ones).
type Warning struct {
	Code    string    `json:"code"`
	Message string    `json:"message"`
	At      time.Time `json:"at"`
}

// Warning codes of run outputs.
const (
	// WarnArtifactLimit: a file or the run went past ARTIFACT_MAX_FILE_BYTES,
	// ARTIFACT_MAX_RUN_BYTES or the file count, and was not kept.
	WarnArtifactLimit = "artifact_limit"
	// WarnArtifactError: an output could not be stored (or restored); the
	// message says which and why.
	WarnArtifactError = "artifact_error"
)

// MaxWarnings bounds the warnings a run keeps; later ones are dropped.
const MaxWarnings = 100

// MaxWarningBytes bounds a warning's message.
const MaxWarningBytes = 512

// ErrArtifactPath is wrapped by CheckArtifactPath's errors.
var ErrArtifactPath = errors.New("invalid artifact path")

// CheckArtifactPath validates the path of an artifact as the worker sends
// it and as REST names it: relative to the output dir, "/"-separated, at
// most MaxArtifactPath bytes of valid UTF-8, no NUL or other control
// character (C0, C1, bidi controls, line separators), no empty, "." or ".." element, no leading or trailing "/".
// It is the one rule, applied on the worker, on the master's receiver
// before a path reaches the index, and on download. Paths never touch the
// master's file system (blobs are named by digest); the rule keeps a
// restored file inside the next attempt's output dir.
func CheckArtifactPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty", ErrArtifactPath)
	case len(p) > MaxArtifactPath:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrArtifactPath, len(p), MaxArtifactPath)
	case !utf8.ValidString(p):
		return fmt.Errorf("%w: %.80q is not UTF-8", ErrArtifactPath, p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: %.80q is absolute", ErrArtifactPath, p)
	}
	for _, r := range p {
		// C0 and C1 controls, and what reorders or breaks the text a
		// person reads (bidi overrides and isolates, line separators): a
		// name shown in a listing must read as the file it is.
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("%w: %.80q holds a control or text-direction character (U+%04X)", ErrArtifactPath, p, r)
		}
	}
	for elem := range strings.SplitSeq(p, "/") {
		switch elem {
		case "":
			return fmt.Errorf("%w: %.80q has an empty element", ErrArtifactPath, p)
		case ".", "..":
			return fmt.Errorf("%w: %.80q has a %q element", ErrArtifactPath, p, elem)
		}
	}
	return nil
}

// Resumes reports whether this attempt of t starts from earlier outputs:
// a retry or a requeue (attempt > 1, whatever requeued it: a lost worker,
// a preemption) restores the newest version of every file of t's earlier
// attempts, and a run submitted with resumeFrom restores that run's files.
// The worker then sets RLSCHED_RESUME=1. The one rule: dispatch asks it
// when it sends ExecuteTask.
func (t *Task) Resumes() bool { return t.Attempt > 1 || t.ResumeFrom != "" }
