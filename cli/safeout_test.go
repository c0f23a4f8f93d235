package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rlsched/rlsched/core"
)

// hostile is what a run, a user or a server can put in text the CLI
// prints: a clear-screen, a window title, a bell, a carriage return that
// overwrites the line, an 8-bit CSI (raw and as UTF-8) and a DEL.
const hostile = "A\x1b[2J\x1b]0;pwned\x07B\rC\xc2\x9b31mD\x9bE\x7fF\tG"

// controlsIn lists the terminal controls left in out: C0 but \n and \t,
// DEL, C1 (as UTF-8 or as raw 8-bit bytes).
func controlsIn(out string) []string {
	var found []string
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			found = append(found, "raw byte "+string(rune(out[i])))
		case r < 0x20 && r != '\n' && r != '\t', r == 0x7f, r >= 0x80 && r <= 0x9f:
			found = append(found, string(r))
		}
		i += n
	}
	return found
}

// TestTerminalEscapesNeutralised (issue 12): what the CLI prints of names,
// errors and logs cannot drive the terminal: controls are shown as ^X
// (and 8-bit ones as M-^X), except with logs --raw; on stdout only when it
// is a terminal (into a file, a log is the run's bytes).
func TestTerminalEscapesNeutralised(t *testing.T) {
	h := newHarness(t)
	h.env.ttyOut = true
	h.login()
	id := h.f.addTask(core.Task{Name: "run" + hostile, User: "alice", Status: core.StatusFailed, Error: "boom" + hostile,
		Worker: "w" + hostile, Command: []string{"python3", "x" + hostile}})
	h.f.logs[id] = []byte("line 1\n" + hostile + "\nline 3 \xe2\x82")
	h.f.logs[id] = append(h.f.logs[id], "\xac euro split across reads\n"...)
	h.f.logMax = 15 // several reads, one splitting the euro sign
	for _, args := range [][]string{{"ls"}, {"show", id}, {"logs", id}, {"logs", "-f", id}} {
		code, out, errs := h.run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, errs)
		}
		if bad := controlsIn(out + errs); len(bad) > 0 {
			t.Errorf("%v printed terminal controls %q:\n%q", args, bad, out)
		}
		if !strings.Contains(out, "^[[2J") || !strings.Contains(out, "^G") {
			t.Errorf("%v: the controls are not shown as ^X:\n%q", args, out)
		}
		if args[0] == "logs" && (!strings.Contains(out, "A^[[2J^[]0;pwned^GB^MCM-^[31mD\uFFFDE^?F\tG\n") || !strings.Contains(out, "€ euro split")) {
			t.Errorf("%v: the log is not shown faithfully:\n%q", args, out)
		}
	}
	// --raw: the run's own bytes, escapes and all, for whoever trusts it;
	// and so into a file.
	_, out, _ := h.run("logs", "--raw", id)
	if !strings.Contains(out, hostile) {
		t.Errorf("logs --raw changed the bytes:\n%q", out)
	}
	h.env.ttyOut = false
	if _, out, _ := h.run("logs", id); !strings.Contains(out, hostile) {
		t.Errorf("logs into a file changed the bytes:\n%q", out)
	}
	h.env.ttyOut = true

	// A server's error message and a worker's host name.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/workers" {
			writeJSON(w, 200, map[string]any{"items": []core.WorkerInfo{{ID: "w" + hostile, Host: "h" + hostile, State: core.WorkerIdle}}})
			return
		}
		writeErr(w, r, 400, "bad_request", "no"+hostile)
	}))
	defer evil.Close()
	h.vars["RLSCHED_SERVER"] = evil.URL
	h.vars["RLSCHED_TOKEN"] = "tok"
	for _, args := range [][]string{{"workers"}, {"ls"}, {"show", "r1"}} {
		_, out, errs := h.run(args...)
		if bad := controlsIn(out + errs); len(bad) > 0 {
			t.Errorf("%v printed terminal controls %q:\n%q\n%q", args, bad, out, errs)
		}
		if !strings.Contains(out+errs, "^[[2J") {
			t.Errorf("%v: %q %q", args, out, errs)
		}
	}
}

func TestSafeWriter(t *testing.T) {
	var b bytes.Buffer
	w := newSafeWriter(&b)
	// Byte by byte: sequences split across writes come out whole.
	in := "é€😀\x1b[0m\xc2\x85\xff\n"
	for i := 0; i < len(in); i++ {
		_, _ = w.Write([]byte{in[i]})
	}
	_, _ = w.Write([]byte("\xe2\x82")) // a dangling start, flushed as U+FFFD
	w.flush()
	if got, want := b.String(), "é€😀^[[0mM-^E\uFFFD\n\uFFFD"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
