package core

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

var (
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
// It is ^[A-Za-z0-9_-]{1,64}$ as a loop: the log pipe asks it for every
// batch and every ack (core.ParseLogKey), where the regexp cost 8% of the
// master's CPU in the logs benchmark.
func ValidTaskID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !idByte[c] {
			return false
		}
	}
	return true
}

// idByte marks the bytes of the task id alphabet, [A-Za-z0-9_-].
var idByte = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c], t[c+'a'-'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['_'], t['-'] = true, true
	return t
}()

// ValidWorkerID uses the same alphabet as task ids.
func ValidWorkerID(id string) bool { return ValidTaskID(id) }

// ValidUsername: 3–32 of [A-Za-z0-9_.-]. Sign-in looks names up by it; a
// new name must also pass CheckNewUsername.
func ValidUsername(s string) bool { return usernameRe.MatchString(s) }

// CheckNewUsername is the rule for a name being registered: ValidUsername,
// starting and ending with a letter or digit (no "...", "-x" or "x."
// beside "x"). Names that differ only in case are one name for
// registration (UsernameFold): the store refuses "Boss" beside "boss".
func CheckNewUsername(s string) error {
	if !usernameRe.MatchString(s) {
		return errors.New("a username is 3–32 of [A-Za-z0-9_.-]")
	}
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return errors.New("a username starts and ends with a letter or a digit")
	}
	return nil
}

// UsernameFold is the key under which usernames must be unique: names that
// differ only in case would read as the same person.
func UsernameFold(s string) string { return strings.ToLower(s) }

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// ValidTraceID: 1–64 of [A-Za-z0-9_-].
func ValidTraceID(s string) bool { return traceIDRe.MatchString(s) }
