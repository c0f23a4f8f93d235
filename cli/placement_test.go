package cli

import (
	"strings"
	"testing"
)

// Where a run may go (issue 28): --gpus as a fraction, --gpu-memory,
// --gpu-type and --constraint reach the submission as API.md's fields.
func TestSubmit_Placement(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--gpus", "0.25", "--gpu-memory", "10GiB", "--gpu-type", "A100", "--gpu-type", "H100",
		"--constraint", "pool=a100", "--constraint", "!pool=interactive", "--", "python3", "train.py")
	m := h.trainBody()
	if jsonString(m["gpus"]) != "0.25" || jsonString(m["gpuMemoryMb"]) != "10240" || jsonString(m["gpuType"]) != `["A100","H100"]` ||
		jsonString(m["constraints"]) != `{"!pool":"interactive","pool":"a100"}` {
		t.Fatalf("body %v", m)
	}
	h.mustRun(0, "submit", "--gpus", "2", "--", "x")
	if m := h.trainBody(); jsonString(m["gpus"]) != "2" || m["gpuType"] != nil || m["constraints"] != nil {
		t.Fatalf("body %v", m)
	}
	f := func(want string, args ...string) {
		t.Helper()
		_, errs := h.mustRun(ExitUsage, append(append([]string{"submit"}, args...), "--", "x")...)
		if !strings.Contains(errs, want) {
			t.Errorf("%v: stderr %q lacks %q", args, errs, want)
		}
	}
	f("--gpus must not be negative", "--gpus", "-0.5")
	f("--gpu-memory", "--gpus", "1", "--gpu-memory", "lots")
	f("want KEY=VALUE", "--constraint", "pool")
	f("empty --gpu-type", "--gpu-type", " ")
}
