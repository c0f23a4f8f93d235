package cli

import "testing"

// --nodes N reaches the submission as API.md's nodes (issue 29); without
// it the body has none (the master's default, 1). The master judges the
// range, so 0 is sent as given.
func TestSubmit_Nodes(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--nodes", "3", "--gpus", "2", "--", "torchrun", "train.py")
	if m := h.trainBody(); jsonString(m["nodes"]) != "3" || jsonString(m["gpus"]) != "2" {
		t.Fatalf("body %v", m)
	}
	h.mustRun(0, "submit", "--", "x")
	if m := h.trainBody(); m["nodes"] != nil {
		t.Fatalf("body without --nodes: %v", m)
	}
	h.mustRun(0, "submit", "--nodes", "0", "--", "x")
	if m := h.trainBody(); jsonString(m["nodes"]) != "0" {
		t.Fatalf("body with --nodes 0: %v", m)
	}
}
