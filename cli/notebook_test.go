package cli

import (
	"strings"
	"testing"
)

// rlsched notebook: an interactive run with a port, the URL on stdout; the
// default command is JupyterLab with a token of its own in the URL.
func TestNotebookCommand(t *testing.T) {
	h := newHarness(t)
	h.login()
	out, _ := h.mustRun(0, "notebook", "--no-wait", "--port", "8000", "--gpus", "1", "--", "python3", "app.py")
	m := h.trainBody()
	if m["kind"] != "interactive" || jsonString(m["port"]) != "8000" || jsonString(m["gpus"]) != "1" {
		t.Fatalf("the submission: %v", m)
	}
	url := strings.TrimSpace(out)
	if !strings.HasPrefix(url, h.f.url()+"/sessions/") || !strings.HasSuffix(url, "/") || strings.Contains(url, "token") {
		t.Fatalf("stdout %q: want the session's URL alone", out)
	}
	out, _ = h.mustRun(0, "notebook", "--no-wait")
	m = h.trainBody()
	env, _ := m["env"].(map[string]any)
	tok, _ := env["JUPYTER_TOKEN"].(string)
	cmd, _ := m["command"].([]any)
	if len(tok) < 32 || jsonString(m["port"]) != "8888" || len(cmd) != 3 || !strings.Contains(cmd[2].(string), "jupyter lab") {
		t.Fatalf("the default notebook: %v", m)
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "/lab?token="+tok) {
		t.Fatalf("stdout %q: want the URL with Jupyter's token", out)
	}
	for _, p := range []string{"0", "70000"} {
		if _, errs := h.mustRun(ExitUsage, "notebook", "--port", p); !strings.Contains(errs, "--port must be 1..65535") {
			t.Errorf("--port %s: %q", p, errs)
		}
	}
}

// rlsched shell and notebook take submit's --image and Python env flags,
// checked as submit checks them.
func TestSessionImageAndPython(t *testing.T) {
	h := newHarness(t)
	h.login()
	h.mustRun(0, "notebook", "--no-wait", "--image", "pytorch/pytorch:2.3.0", "--", "python3", "app.py")
	if got := jsonString(h.trainBody()["image"]); got != `"pytorch/pytorch:2.3.0"` {
		t.Errorf("--image: image = %s", got)
	}
	h.mustRun(0, "notebook", "--no-wait", "--venv", "/shared/envs/x", "--", "python3", "app.py")
	if got := jsonString(h.trainBody()["python"]); got != `{"venv":"/shared/envs/x"}` {
		t.Errorf("--venv: python = %s", got)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"shell", "--image", "--privileged"}, "must be a container image reference"},
		{[]string{"shell", "--image", "debian", "--venv", "/v"}, "--image runs in the image's own Python"},
		{[]string{"shell", "--code", ".", "--no-code"}, "give --code DIR or --no-code, not both"},
	} {
		if _, errs := h.mustRun(ExitUsage, c.args...); !strings.Contains(errs, c.want) {
			t.Errorf("%v: %q, want %q", c.args, errs, c.want)
		}
	}
}
