package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestKit keeps the test kits (internal/testkit) and the
// bench out of the rlsched binary: what they hold (fake nvidia-smi, tool
// servers, fixed secrets) must never ship.
func TestBinaryLinksNoTestKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/rlsched/rlsched/internal/testkit") ||
			strings.HasPrefix(dep, "github.com/rlsched/rlsched/bench") {
			t.Errorf("the rlsched binary links %s", dep)
		}
	}
}
