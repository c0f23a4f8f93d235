package cli

import (
	"strings"
	"testing"
)

// TestNotify: show, set, off and test against the real REST API. The
// master refuses its own network without NOTIFY_ALLOW_HOSTS, so a set of
// a loopback hook is its 400 (httpapi's TestNotificationTest sends one).
func TestNotify(t *testing.T) {
	h, _ := sweepHarness(t)
	if out, _ := h.mustRun(ExitOK, "notify", "show"); !strings.Contains(out, "notifications: off") {
		t.Errorf("show before any: %q", out)
	}
	if _, errs := h.mustRun(ExitError, "notify", "set", "http://127.0.0.1:9/hook", "--on", "FAILED"); !strings.Contains(errs, "loopback") {
		t.Errorf("set of a loopback hook: %q", errs)
	}
	if _, errs := h.mustRun(ExitError, "notify", "test"); !strings.Contains(errs, "no webhook is set") {
		t.Errorf("test without a webhook: %q", errs)
	}
	if out, _ := h.mustRun(ExitOK, "notify", "off"); !strings.Contains(out, "notifications: off") {
		t.Errorf("off: %q", out)
	}
	if out, _ := h.mustRun(ExitOK, "notify", "show", "--json"); !strings.Contains(out, `"webhook": ""`) {
		t.Errorf("show --json: %q", out)
	}
	for _, args := range [][]string{{"notify"}, {"notify", "ring"}, {"notify", "set"}, {"notify", "show", "--on", "FAILED"}} {
		if code, _, _ := h.run(args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
}
