package nvsmi

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns s without control and format characters (a command
// line or an error message goes to a browser and a terminal: no escape
// sequences, no bidi overrides) and with invalid UTF-8 replaced, cut to at
// most limit bytes on a rune boundary.
func printable(s string, limit int) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > limit {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}
