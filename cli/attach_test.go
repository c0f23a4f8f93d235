package cli

import "testing"

func TestDetachScan(t *testing.T) {
	f := func(in string, escaped bool, want string, wantEsc, wantDetached bool) {
		t.Helper()
		out, esc, det := detachScan([]byte(in), escaped)
		if string(out) != want || esc != wantEsc || det != wantDetached {
			t.Errorf("detachScan(%q, %v) = %q, %v, %v; want %q, %v, %v", in, escaped, out, esc, det, want, wantEsc, wantDetached)
		}
	}
	f("ls\r", false, "ls\r", false, false)
	f("ls\r\x1dd", false, "ls\r", false, true)
	f("\x1d", false, "", true, false) // split across reads...
	f("d", true, "", false, true)     // ...still detaches
	f("\x1d\x1d", false, "\x1d", false, false)
	f("a\x1dx", false, "a\x1dx", false, false)
	f("x", true, "\x1dx", false, false)
	f("dd", false, "dd", false, false)
}
