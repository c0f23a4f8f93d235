package goal

import "testing"

func TestParse(t *testing.T) {
	f := func(in string, want Goal, ok bool) {
		t.Helper()
		g, err := Parse(in)
		if (err == nil) != ok || g != want {
			t.Errorf("Parse(%q) = %q, %v; want %q, ok %v", in, g, err, want, ok)
		}
	}
	f("", Maximize, true)
	f("maximize", Maximize, true)
	f("minimize", Minimize, true)
	f("max", "", false)
	f("Minimize", "", false)
}

func TestBetter(t *testing.T) {
	f := func(g Goal, a, b float64, want bool) {
		t.Helper()
		if got := g.Better(a, b); got != want {
			t.Errorf("%q.Better(%v, %v) = %v; want %v", g, a, b, got, want)
		}
	}
	f(Maximize, 2, 1, true)
	f(Maximize, 1, 2, false)
	f(Maximize, 1, 1, false)
	f(Minimize, 1, 2, true)
	f(Minimize, 2, 1, false)
	f("", 2, 1, true)
}
