package rig

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Line is one JSON log line of a process (LOG_FORMAT=json).
type Line map[string]any

// Str is field k as text ("" when absent).
func (l Line) Str(k string) string {
	switch v := l[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// Msg is the line's message.
func (l Line) Msg() string { return l.Str("message") }

func (l Line) String() string {
	b, _ := json.Marshal(map[string]any(l))
	return string(b)
}

// ParseLog parses the complete JSON lines of a process's log file (a last
// line still being written is left out); other lines (the guard's, a
// panic) are skipped. A file that cannot be read has none.
func ParseLog(path string) []Line {
	data, _ := os.ReadFile(path)
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	var out []Line
	sc := bufio.NewScanner(bytes.NewReader(data[:i+1]))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l Line
		if json.Unmarshal(line, &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// Crashed reports whether a process's output shows a panic, a Go runtime
// fatal error, a data race or a BUG: line.
func Crashed(output string) bool {
	for _, s := range []string{"panic: ", `"message":"BUG:`, "fatal error: ", "DATA RACE"} {
		if strings.Contains(output, s) {
			return true
		}
	}
	return false
}

// Tail is the last lines of s.
func Tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// TailFile is the last lines of the file at path ("" when unreadable).
func TailFile(path string, lines int) string {
	b, _ := os.ReadFile(path)
	return Tail(string(b), lines)
}
