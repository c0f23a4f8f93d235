package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// rlsched edit changes the record through PATCH /api/tasks/{id}; show
// prints it; a flag of the wrong kind, or none, is a usage error.
func TestEdit(t *testing.T) {
	h, rs := sweepHarness(t)
	out, _ := h.mustRun(0, "submit", "--tag", "draft", "--tag", "keep", "--", "python3", "train.py")
	id := strings.TrimSpace(out)
	out, _ = h.mustRun(0, "edit", id, "--name", "ppo, lr 3e-4", "--tag", "paper", "--untag", "draft",
		"--note", "line one\nline two", "--baseline", "true")
	if want := "name: ppo, lr 3e-4\ntags: keep,paper\nbaseline: true\nnote: line one | line two\n"; out != want {
		t.Fatalf("edit printed %q, want %q", out, want)
	}
	got, err := rs.st.Task(context.Background(), id)
	if err != nil || got.Name != "ppo, lr 3e-4" || !slices.Equal(got.Tags, []string{"keep", "paper"}) ||
		got.Note != "line one\nline two" || !got.Baseline {
		t.Fatalf("the store has %+v, %v", got, err)
	}
	out, _ = h.mustRun(0, "show", id)
	if !strings.Contains(out, "\nbaseline: true\n") || !strings.Contains(out, "\nnote: line one | line two\n") {
		t.Fatalf("show after edit:\n%s", out)
	}
	for _, args := range [][]string{{"--is-baseline"}, {"--note", "LINE TWO"}, {"--tag", "paper"}} {
		out, _ = h.mustRun(0, append([]string{"ls"}, args...)...)
		if !strings.Contains(out, id) {
			t.Fatalf("ls %v after the edit:\n%s", args, out)
		}
	}
	out, _ = h.mustRun(0, "edit", id, "--note", "", "--baseline", "false", "--json")
	if !strings.Contains(out, `"note": ""`) || !strings.Contains(out, `"baseline": false`) {
		t.Fatalf("edit --json:\n%s", out)
	}
	if out, _ = h.mustRun(0, "ls", "--is-baseline"); strings.Contains(out, id) {
		t.Fatalf("ls --is-baseline lists a run no longer marked:\n%s", out)
	}
	_, errs := h.mustRun(2, "edit", id)
	if !strings.Contains(errs, "nothing to change") {
		t.Fatalf("edit without a change: %s", errs)
	}
	_, errs = h.mustRun(2, "edit", id, "--baseline", "maybe")
	if !strings.Contains(errs, "--baseline takes true or false") {
		t.Fatalf("edit --baseline maybe: %s", errs)
	}
	_, errs = h.mustRun(1, "edit", id, "--name", "")
	if !strings.Contains(errs, "name must be 1..200 characters") {
		t.Fatalf("edit --name '': %s", errs)
	}
}
