package clip

import "testing"

func TestString(t *testing.T) {
	f := func(s string, n int, want string) {
		t.Helper()
		if got := String(s, n); got != want {
			t.Fatalf("String(%q, %d) = %q, want %q", s, n, got, want)
		}
	}
	f("", 0, "")
	f("abc", 3, "abc")
	f("abcd", 3, "abc…")
	f("abc", 0, "…")
	f("aé", 2, "a…") // é is 2 bytes: never half a rune
	f("éé", 3, "é…")
	f("日本", 1, "…")
}
