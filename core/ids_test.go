package core

import (
	"regexp"
	"strings"
	"testing"
)

// ValidTaskID is a loop for speed; it must accept exactly what the rule's
// regexp accepts.
func TestValidTaskIDMatchesItsRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	cases := []string{"", "a", "r0193abc", "A-Z_09", strings.Repeat("x", 64), strings.Repeat("x", 65),
		"a.b", "a/b", "../x", "a b", "a\n", "\x00", "é", "ab\xff", "run.rank1", NewTaskID(), NewSweepID()}
	for c := 0; c < 256; c++ {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	for _, id := range cases {
		if got, want := ValidTaskID(id), re.MatchString(id); got != want {
			t.Errorf("ValidTaskID(%q) = %v, the regexp says %v", id, got, want)
		}
	}
}

func FuzzValidTaskID(f *testing.F) {
	re := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	f.Add("r0193abc")
	f.Add("a.rank1")
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidTaskID(id), re.MatchString(id); got != want {
			t.Fatalf("ValidTaskID(%q) = %v, the regexp says %v", id, got, want)
		}
	})
}

func BenchmarkParseLogKey(b *testing.B) {
	id := NewTaskID()
	for b.Loop() {
		if _, _, ok := ParseLogKey(id); !ok {
			b.Fatal(id)
		}
	}
}
