package core

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"time"
)

var (
	taskIDRe   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	usernameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{3,32}$`)
	traceIDRe  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// NewTaskID returns a new run id: a millisecond timestamp then randomness,
// so ids sort by creation time and are safe as file names.
func NewTaskID() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("r%011x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// NewSweepID returns a new sweep id, made like a run id but starting with
// "s"; it passes ValidTaskID, so the same checks guard it.
func NewSweepID() string { return "s" + NewTaskID()[1:] }

// NewTraceID returns 32 hex characters.
func NewTraceID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidTaskID reports whether id may name a run; only valid ids may touch a path.
func ValidTaskID(id string) bool { return taskIDRe.MatchString(id) }

// ValidWorkerID uses the same alphabet as task ids.
func ValidWorkerID(id string) bool { return taskIDRe.MatchString(id) }

// ValidUsername: 3–32 of [A-Za-z0-9_.-].
func ValidUsername(s string) bool { return usernameRe.MatchString(s) }

// ValidTraceID: 1–64 of [A-Za-z0-9_-].
func ValidTraceID(s string) bool { return traceIDRe.MatchString(s) }
