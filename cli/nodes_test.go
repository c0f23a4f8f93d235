package cli

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

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

// logs --rank N prints a group member's log; rank 0's is the run's.
func TestLogs_Rank(t *testing.T) {
	h := newHarness(t)
	h.login()
	id := h.f.addTask(core.Task{Status: core.StatusSucceeded, Nodes: 2})
	h.f.mu.Lock()
	h.f.logs[id], h.f.logs[id+".rank1"] = []byte("rank zero\n"), []byte("rank one\n")
	h.f.mu.Unlock()
	if out, _ := h.mustRun(0, "logs", id); out != "rank zero\n" {
		t.Fatalf("logs: %q", out)
	}
	if out, _ := h.mustRun(0, "logs", "--rank", "1", id); out != "rank one\n" {
		t.Fatalf("logs --rank 1: %q", out)
	}
	if _, errs := h.mustRun(ExitUsage, "logs", "--rank", "-1", id); !strings.Contains(errs, "--rank must not be negative") {
		t.Fatalf("--rank -1: %q", errs)
	}
	// -f follows another rank by polling: the run ended, so to the end.
	if out, _ := h.mustRun(0, "logs", "-f", "--rank", "1", id); out != "rank one\n" {
		t.Fatalf("logs -f --rank 1: %q", out)
	}
}
