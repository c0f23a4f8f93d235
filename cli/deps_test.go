package cli

import (
	"strings"
	"testing"
)

func TestSubmit_After(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--after", "r1", "--after-ok", "r2", "--after-sweep", "s3", "--inputs-from", "r2", "--", "python3", "eval.py")
	m := h.trainBody()
	if got := jsonString(m["after"]); got != `[{"run":"r1","when":"ended"},{"run":"r2","when":"succeeded"},{"sweep":"s3","when":"ended"}]` {
		t.Errorf("after = %s", got)
	}
	if got := jsonString(m["inputsFrom"]); got != `["r2"]` {
		t.Errorf("inputsFrom = %s", got)
	}
	h.mustRun(0, "submit", "--", "python3", "train.py")
	if m := h.trainBody(); m["after"] != nil || m["inputsFrom"] != nil {
		t.Errorf("sent after %v inputsFrom %v unasked", m["after"], m["inputsFrom"])
	}
	_, errs := h.mustRun(ExitUsage, "submit", "--after", "../x", "--", "x")
	if !strings.Contains(errs, "invalid --after") {
		t.Errorf("bad --after: %q", errs)
	}
}
