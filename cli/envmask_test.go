package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestShowMasksOthersEnv (issue 12): `rlsched show` of another user's run
// prints its env names with every value as "***"; its owner sees them.
func TestShowMasksOthersEnv(t *testing.T) {
	rs := newRealServer(t, false)
	h := newHarness(t)
	h.vars["RLSCHED_SERVER"] = rs.url
	as := func(name string) {
		h.env.ConfigDir = filepath.Join(t.TempDir(), name) // a login of its own
		h.stdin = "password-" + name + "\n"
		h.mustRun(0, "register", "-u", name, "--password-stdin")
		h.stdin = "password-" + name + "\n"
		h.mustRun(0, "login", "-u", name, "--password-stdin")
	}
	as("root") // the first user is an admin
	as("alice")
	aliceCfg := h.env.ConfigDir
	out, _ := h.mustRun(0, "submit", "--env", "WANDB_API_KEY=s3cret", "--", "true")
	id := strings.TrimSpace(out)
	if out, _ := h.mustRun(0, "show", id); !strings.Contains(out, `"WANDB_API_KEY":"s3cret"`) {
		t.Fatalf("the owner's show:\n%s", out)
	}
	as("bob")
	for _, args := range [][]string{{"show", id}, {"show", "--json", id}, {"ls", "--json"}} {
		out, _ := h.mustRun(0, args...)
		if strings.Contains(out, "s3cret") || !strings.Contains(out, `"WANDB_API_KEY"`) || !strings.Contains(out, `"***"`) {
			t.Errorf("%v as another user:\n%s", args, out)
		}
	}
	h.env.ConfigDir = aliceCfg
	if out, _ := h.mustRun(0, "show", id); !strings.Contains(out, "s3cret") {
		t.Errorf("the owner again:\n%s", out)
	}
}
