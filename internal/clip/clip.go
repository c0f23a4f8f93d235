// Package clip bounds text that came from outside (a request, a file, a
// peer's answer) before it is quoted in an error message or a log line, so
// that no sender decides how long either gets.
//
// What it must never do: change text that fits, or choose the bound: each
// caller knows what its message can hold.
package clip

import "unicode/utf8"

// String is s when it has at most n bytes, else its first n bytes or
// fewer (the cut backs off to the start of a rune, so valid UTF-8 stays
// valid) followed by "…".
func String(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:max(n, 0)] + "…"
}
