package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpServerIsTheDefault: with no --server, RLSCHED_SERVER or login, the
// CLI talks to the URL a running `rlsched up` recorded (issue 32: make run
// printed the gateway's URL while the CLI talked to the master); once up
// forgets it, DefaultServer again. token prints the login's token for it.
func TestUpServerIsTheDefault(t *testing.T) {
	h := newHarness(t)
	delete(h.vars, "RLSCHED_SERVER")
	t.Setenv("RLSCHED_CONFIG_DIR", h.env.ConfigDir) // where RememberUp (in up's process) writes
	path, forget, err := RememberUp(h.f.url(), "/data")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 || filepath.Dir(path) != h.env.ConfigDir {
		t.Fatalf("RememberUp wrote %s (%v, %v); want mode 0600 in %s", path, st, err, h.env.ConfigDir)
	}
	_, errs := h.mustRun(ExitError, "token")
	if !strings.Contains(errs, "not signed in to "+h.f.url()) {
		t.Errorf("token without a login: %q; want it to name up's URL %s", errs, h.f.url())
	}
	h.login() // no --server: to up's URL
	out, _ := h.mustRun(ExitOK, "whoami")
	if !strings.Contains(out, "alice") || !strings.Contains(out, h.f.url()) {
		t.Errorf("whoami: %q", out)
	}
	tok, _ := h.mustRun(ExitOK, "token")
	if strings.TrimSpace(tok) == "" || strings.Count(tok, "\n") != 1 {
		t.Errorf("token printed %q; want the token alone on a line", tok)
	}
	h.mustRun(ExitOK, "logout")
	forget()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("forget left %s: %v", path, err)
	}
	_, errs = h.mustRun(ExitError, "token")
	if !strings.Contains(errs, "not signed in to "+DefaultServer) {
		t.Errorf("token after up forgot its URL: %q; want %s", errs, DefaultServer)
	}
}
