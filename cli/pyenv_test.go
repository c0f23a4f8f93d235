package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSubmit_PythonEnv (issue 27): --requirements names a file relative to
// the run's working directory, --venv an absolute venv on the worker.
func TestSubmit_PythonEnv(t *testing.T) {
	h := newHarness(t)
	h.login()
	if err := os.MkdirAll(filepath.Join(h.env.Dir, "exp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.env.Dir, "exp", "requirements.txt"), []byte("numpy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, reqFlag := range []string{"exp/requirements.txt", "./exp/requirements.txt", filepath.Join(h.env.Dir, "exp", "requirements.txt")} {
		h.mustRun(0, "submit", "--requirements", reqFlag, "--", "python3", "train.py")
		if got := jsonString(h.trainBody()["python"]); got != `{"requirements":"exp/requirements.txt"}` {
			t.Errorf("--requirements %s: python = %s", reqFlag, got)
		}
	}
	h.mustRun(0, "submit", "--venv", "/shared/envs/x", "--", "python3", "train.py")
	if got := jsonString(h.trainBody()["python"]); got != `{"venv":"/shared/envs/x"}` {
		t.Errorf("--venv: python = %s", got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--requirements", "r.txt", "--venv", "/v"}, "not both"},
		{[]string{"--venv", "envs/x"}, "must be an absolute path"},
		{[]string{"--requirements", "../r.txt"}, "outside the run's working directory"},
		{[]string{"--requirements", "/etc/passwd"}, "outside the run's working directory"},
		{[]string{"--requirements", "missing.txt"}, "missing.txt"},
	} {
		code, _, errs := h.run(append(append([]string{"submit"}, c.args...), "--", "python3", "x.py")...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("submit %v: exit %d, stderr %q; want an error with %q", c.args, code, errs, c.want)
		}
	}
}

// TestSubmit_Image (issue 27): --image names the container image the run
// runs in; a bad reference, or one with a Python env, is refused.
func TestSubmit_Image(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "submit", "--image", "pytorch/pytorch:2.3.0", "--", "python3", "train.py")
	if got := jsonString(h.trainBody()["image"]); got != `"pytorch/pytorch:2.3.0"` {
		t.Errorf("--image: image = %s", got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--image", "--privileged"}, "must be a container image reference"},
		{[]string{"--image", "debian", "--venv", "/v"}, "--image runs in the image's own Python"},
	} {
		code, _, errs := h.run(append(append([]string{"submit"}, c.args...), "--", "python3", "x.py")...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("submit %v: exit %d, stderr %q; want an error with %q", c.args, code, errs, c.want)
		}
	}
}
