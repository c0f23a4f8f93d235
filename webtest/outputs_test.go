package webtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRunPageCode: the run page shows the code a run was submitted with
// (commit, dirty flag, the remote without its token) and, to its owner, the
// diff, collapsed until asked for and shown as text, never as markup;
// another user learns only that one is recorded. Metrics whose names hold a
// '/' (TensorBoard tags such as train/loss) get charts like the others.
func TestRunPageCode(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("ivy")
	jon := s.api().signup("jon")
	diff := "diff --git a/train.py b/train.py\nindex 1111111..2222222 100644\n--- a/train.py\n+++ b/train.py\n@@ -1,3 +1,3 @@\n import json\n-lr = 1e-3\n+lr = 3e-4  # <img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>\n print(lr)\n"
	prog := "import json\nfor i in range(1, 41):\n    print('RLSCHED_METRIC ' + json.dumps({'step': i, 'train/loss': 1.0 / i, 'episode_reward': float(i)}), flush=True)\n"
	id := a.submit(map[string]any{"name": "code-run", "command": []string{"python3", "-c", prog},
		"code": map[string]any{"gitCommit": "0123456789abcdef0123456789abcdef01234567", "gitDirty": true,
			"gitRemote": "https://ivy:ghp_secret@github.com/lab/rl.git", "diff": diff}})
	a.waitStatus(id, "SUCCEEDED", 90*time.Second)
	st, raw := a.do("GET", "/api/tasks/"+id, nil)
	var tk struct {
		Code map[string]any `json:"code"`
	}
	if err := json.Unmarshal(raw, &tk); st != 200 || err != nil || tk.Code["hasDiff"] != true {
		t.Fatalf("task: %d %s", st, raw)
	}

	b := newBrowser(t)
	b.signIn(s.url, "ivy")
	b.open(s.url + "/runs/" + id)
	b.wait("the code card", 20*time.Second, `document.querySelector('#code-commit') !== null`)
	if got := b.text("#code-commit"); got != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("commit shows %q", got)
	}
	if got := b.text("#code-remote"); got != "https://github.com/lab/rl.git" {
		t.Errorf("remote shows %q", got)
	}
	if b.text("#code-dirty") != "dirty" {
		t.Error("the dirty flag is not shown")
	}
	if eval[bool](b, `document.querySelector('#code-diff').open`) || eval[bool](b, `document.querySelector('#diff-text') !== null`) {
		t.Error("the diff is open before anyone asked for it")
	}
	b.click("#code-diff > summary")
	b.wait("the diff", 15*time.Second, `document.querySelector('#diff-text') !== null`)
	text := b.text("#diff-text")
	if text != diff {
		t.Errorf("diff shows %q, want the diff as submitted", text)
	}
	if eval[bool](b, `document.querySelectorAll('#diff-text img, #diff-text script').length > 0 || window.__pwned === 1`) {
		t.Fatal("the diff was rendered as markup")
	}
	if n := eval[int](b, `document.querySelectorAll('#diff-text .add').length * 10 + document.querySelectorAll('#diff-text .del').length`); n != 11 {
		t.Errorf("added*10+removed lines marked = %d, want 11", n)
	}
	if got := b.text("#diff-stat"); got != "1 file changed, 1 line added, 1 removed" {
		t.Errorf("diff summary %q", got)
	}
	// A live update of the run does not collapse it.
	b.wait("the charts", 20*time.Second, `(() => { const p = document.querySelector('[data-chart="train/loss"] path.line[data-points]'); return p && Number(p.dataset.points) === 40; })()`)
	if !eval[bool](b, `document.querySelector('#code-diff').open`) {
		t.Error("the diff closed by itself")
	}
	if got := b.text(`[data-chart="train/loss"] .chart-title`); !strings.HasPrefix(got, "train/loss") {
		t.Errorf("the train/loss chart is titled %q", got)
	}
	b.wait("the empty artifacts box", 10*time.Second, `document.querySelector('#artifacts-empty') !== null`)
	b.screenshot("14-run-code-diff")

	// Another user sees that a diff exists, not the diff.
	b2 := newBrowser(t)
	b2.signIn(s.url, "jon")
	b2.open(s.url + "/runs/" + id)
	b2.wait("the code card", 20*time.Second, `document.querySelector('#diff-note') !== null`)
	if got := b2.text("#diff-note"); !strings.Contains(got, "only the owner and admins") {
		t.Errorf("another user's note: %q", got)
	}
	if eval[bool](b2, `document.querySelector('#code-diff') !== null`) {
		t.Error("another user is offered the diff")
	}
	if st, _ := jon.do("GET", "/api/tasks/"+id+"/code.diff", nil); st != 403 {
		t.Errorf("code.diff for another user: %d", st)
	}
}

// TestRunPageArtifacts: a run's output files are listed with size, attempt
// and a download link; a small JSON file previews pretty-printed, as text.
func TestRunPageArtifacts(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("kim")
	id := a.submit(map[string]any{"name": "ppo-outputs", "algorithm": "PPO", "episodes": 30})
	a.waitStatus(id, "SUCCEEDED", 90*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "kim")
	b.open(s.url + "/runs/" + id)
	b.wait("checkpoint.json in the artifacts table", 30*time.Second, `document.querySelector('#artifacts-table tr[data-path="checkpoint.json"]') !== null`)
	row := `#artifacts-table tr[data-path="checkpoint.json"]`
	if got := b.text(row + " td:nth-child(3)"); got != "1" {
		t.Errorf("attempt column %q, want 1", got)
	}
	href := eval[string](b, `document.querySelector('`+row+` td.path a').getAttribute('href')`)
	if href != "/api/tasks/"+id+"/artifacts/checkpoint.json" {
		t.Errorf("download link %q", href)
	}
	// The link serves the bytes REST lists.
	eval[bool](b, fmt.Sprintf(`(fetch(%q).then((r) => r.text()).then((t) => { window.__download = t; }), true)`, href))
	b.wait("the download", 15*time.Second, `typeof window.__download === 'string'`)
	got := eval[string](b, `window.__download`)
	if !strings.Contains(got, `"episode": 30`) {
		t.Errorf("the download link served %.200q", got)
	}
	b.click(row + " .preview-btn")
	b.wait("the preview", 15*time.Second, `document.querySelector('#preview-text') !== null`)
	if p := b.text("#preview-text"); !strings.Contains(p, "\n  \"episode\": 30,") {
		t.Errorf("preview is not pretty-printed JSON: %.300q", p)
	}
	b.screenshot("15-run-artifacts")
}
