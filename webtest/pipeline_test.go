package webtest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPipelinePage (issue 29): a pipeline whose middle step fails is drawn
// as layers by depth, each step with its status; Retry reruns the failed
// step and the one after it.
func TestPipelinePage(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	s.api().signup("root")
	alice := s.api().signup("alice")
	st, body := alice.do("POST", "/api/pipelines", map[string]any{"name": "exp", "steps": []map[string]any{
		{"name": "train", "command": []string{"true"}},
		{"name": "eval", "command": []string{"false"}, "after": []map[string]string{{"step": "train"}}},
		{"name": "report", "command": []string{"true"}, "after": []map[string]string{{"step": "eval"}}},
	}})
	if st != 202 {
		t.Fatalf("POST /api/pipelines: %d %s", st, body)
	}
	var p struct {
		ID   string            `json:"id"`
		Runs map[string]string `json:"runs"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	alice.waitStatus(p.Runs["report"], "CANCELLED", 60*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "alice")
	b.open(s.url + "/pipelines/" + p.ID)
	b.wait("three layers", 15*time.Second, `document.querySelectorAll('#pipeline-graph .pipeline-layer').length === 3`)
	for step, want := range map[string]string{"train": "SUCCEEDED", "eval": "FAILED", "report": "CANCELLED"} {
		got := b.text(`.pipeline-step[data-step="` + step + `"]`)
		if !strings.Contains(got, want) {
			t.Errorf("step %s drawn %q, want %s", step, got, want)
		}
	}
	if got := b.text(`.pipeline-layer[data-depth="2"]`); !strings.Contains(got, "report") || !strings.Contains(got, "after eval") {
		t.Errorf("the last layer: %q", got)
	}
	// An arrow from each parent to its child, left to right, coloured by
	// the parent's status.
	b.wait("the two edges", 15*time.Second, `document.querySelectorAll('#pipeline-graph path.pipeline-edge').length === 2`)
	if got := eval[string](b, `(() => {
		const e = document.querySelector('#pipeline-graph path.pipeline-edge[data-from="eval"][data-to="report"]');
		if (!e) return 'no edge from eval to report';
		const r = e.getBoundingClientRect(), from = document.querySelector('.pipeline-step[data-step="eval"]').getBoundingClientRect(),
			to = document.querySelector('.pipeline-step[data-step="report"]').getBoundingClientRect();
		if (Math.abs(r.left - from.right) > 2 || Math.abs(r.right - to.left) > 6) return 'edge spans ' + r.left + '..' + r.right + ', boxes end ' + from.right + ' and start ' + to.left;
		return e.getAttribute('stroke');
	})()`); got != "var(--st-failed, var(--border-strong))" {
		t.Errorf("eval → report edge: %v", got)
	}
	b.screenshot("60-pipeline")
	b.click("#retry-pipeline")
	b.wait("the retried steps drawn", 30*time.Second,
		`(() => { const a = document.querySelector('.pipeline-step[data-step="eval"] a'); return a && !a.getAttribute('href').endsWith('`+p.Runs["eval"]+`'); })()`)
}
