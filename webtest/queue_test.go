package webtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestQueuePage: the Queue page lists the waiting runs in serving order
// with their reasons, the viewer's own highlighted, and every user's usage
// and quota.
func TestQueuePage(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 1)
	root := s.api().signup("root")
	alice := s.api().signup("alice")
	busy := alice.submit(map[string]any{"name": "alice-busy", "command": []string{"sleep", "120"}, "gpus": 1})
	alice.waitStatus(busy, "RUNNING", 60*time.Second)
	next := alice.submit(map[string]any{"name": "alice-next", "command": []string{"true"}, "gpus": 1})
	big := root.submit(map[string]any{"name": "root-big", "command": []string{"true"}, "gpus": 2, "priority": 3})

	b := newBrowser(t)
	b.signIn(s.url, "alice")
	b.click(`.mainnav a[href="/queue"]`)
	b.wait("two queued runs", 15*time.Second, `document.querySelectorAll('#queue tr[data-run]').length === 2`)
	if got := b.text(`#queue tr[data-run="` + big + `"]`); !strings.Contains(got, "no_worker") || !strings.HasPrefix(strings.TrimSpace(got), "1") {
		t.Errorf("root's 2-GPU run, first by priority: %q", got)
	}
	if got := b.text(`#queue tr[data-run="` + next + `"]`); !strings.Contains(got, "resources") || !strings.Contains(got, "every GPU is busy") {
		t.Errorf("alice's run: %q", got)
	}
	if got := b.text(`#queue tr[data-run="` + next + `"]`); strings.Contains(got, "ago") {
		t.Errorf("alice's run says when it came, not how long it waited: %q", got)
	}
	if !eval[bool](b, `document.querySelector('#queue tr[data-run="`+next+`"]').classList.contains('mine') &&
		!document.querySelector('#queue tr[data-run="`+big+`"]').classList.contains('mine')`) {
		t.Error("alice's own run is not the one highlighted")
	}
	b.wait("alice's usage row", 15*time.Second, `(() => { const r = document.querySelector('#usage tr[data-user="alice"]'); return r && r.classList.contains('mine') && r.textContent.includes('1'); })()`)
	b.screenshot("30-queue")

	// Alice's preemptible run is preempted for an admin's urgent one; its
	// page says so.
	alice.do("POST", "/api/tasks/"+busy+"/cancel", nil)
	root.do("POST", "/api/tasks/"+big+"/cancel", nil)
	victim := alice.submit(map[string]any{"name": "alice-victim", "command": []string{"sleep", "120"}, "gpus": 1, "preemptible": true})
	alice.waitStatus(next, "SUCCEEDED", 60*time.Second)
	alice.waitStatus(victim, "RUNNING", 60*time.Second)
	root.submit(map[string]any{"name": "root-urgent", "command": []string{"sleep", "120"}, "gpus": 1, "priority": 5})
	b.open(s.url + "/runs/" + victim)
	b.wait("the preemption on the run page", 60*time.Second,
		`(() => { const d = document.querySelector('#attempt-detail'); return d && d.textContent.includes('preempted 1×'); })()`)
	b.wait("the preemption in the timeline", 15*time.Second,
		`(() => { const d = document.querySelector('#timeline-preempted'); return d && d.textContent.includes('Preempted by r'); })()`)
	// One span per attempt, from the run's history: the first ran on the
	// worker and was preempted, the second waits.
	if tl := b.text("#timeline-list"); !strings.Contains(tl, "Attempt 1 on local-0") || !strings.Contains(tl, "Attempt 2 waiting in the queue") {
		t.Errorf("the timeline of a preempted run:\n%s", tl)
	}
	b.screenshot("31-run-preempted")

	// An admin sets alice's quota on the same page; a user has no such card.
	if eval[bool](b, `document.querySelector('#quota-admin') !== null`) {
		t.Error("a user sees the quota editor")
	}
	a := newBrowser(t)
	a.signIn(s.url, "root")
	a.click(`.mainnav a[href="/queue"]`)
	a.wait("the quota editor", 15*time.Second, `document.querySelector('input[data-quota-gpus="alice"]') !== null`)
	if w := eval[int](a, `Math.round(document.querySelector('input[data-quota-gpus="alice"]').getBoundingClientRect().width)`); w > 160 {
		t.Errorf("a quota box %d px wide; a quota is a few digits", w)
	}
	a.typeInto(`input[data-quota-gpus="alice"]`, "2")
	a.click(`button[data-save="alice"]`)
	a.wait("alice's quota in the usage table", 15*time.Second,
		`(() => { const r = document.querySelector('#usage tr[data-user="alice"]'); return r && r.children[4].textContent === '2'; })()`)
	a.screenshot("32-queue-admin")
	var q struct {
		Items []struct {
			User string `json:"user"`
			GPUs *int   `json:"gpus"`
		} `json:"items"`
	}
	st, body := root.do("GET", "/api/admin/quotas", nil)
	if st != 200 || json.Unmarshal(body, &q) != nil {
		t.Fatalf("quotas: %d %s", st, body)
	}
	for _, it := range q.Items {
		if it.User == "alice" && (it.GPUs == nil || *it.GPUs != 2) {
			t.Errorf("alice's quota after the page saved it: %v", it.GPUs)
		}
	}
}

// TestRunTimelineOfALostAttempt (issue 32): a run whose worker is killed
// mid-run is LOST and runs again on another worker; its page's timeline has
// one span per attempt, the first saying it was lost and on which worker,
// at desktop and phone widths.
func TestRunTimelineOfALostAttempt(t *testing.T) {
	needs(t)
	t.Parallel()
	// up's own worker has no GPU: the run goes to the worker killed.
	s := startUp(t, 0, "WORKER_HB_TTL_SECONDS=3", "WORKER_TASK_TTL_SECONDS=4")
	doomed := s.startWorker("doomed", 1)
	alice := s.api().signup("alice")
	id := alice.submit(map[string]any{"name": "alice-lost", "command": []string{"sleep", "600"}, "gpus": 1})
	t.Cleanup(func() { alice.cancel(id) })
	if tk := alice.waitStatus(id, "RUNNING", 60*time.Second); tk.Worker != "doomed" {
		t.Fatalf("the run is on %q, want doomed", tk.Worker)
	}
	doomed.Kill(t) // its guard kills the run
	s.startWorker("spare", 1)
	testutil.Eventually(t, 60*time.Second, func() (bool, string) {
		tk := alice.task(id)
		return tk.Status == "RUNNING" && tk.Worker == "spare", fmt.Sprintf("the run is %s on %q, want RUNNING on spare", tk.Status, tk.Worker)
	})

	b := newBrowser(t)
	b.signIn(s.url, "alice")
	for _, vp := range []struct {
		name string
		act  chromedp.Action[chromedp.Void]
	}{
		{"desktop", chromedp.EmulateViewport(1400, 1000)},
		{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)},
	} {
		b.do(vp.name+" viewport", vp.act)
		b.open(s.url + "/runs/" + id)
		b.wait("attempt 2 in the timeline", 30*time.Second,
			`(() => { const l = document.querySelector('#timeline-list'); return l && l.textContent.includes('Attempt 2 on spare'); })()`)
		// One run span per attempt in the bar, the first drawn as lost and
		// saying where and why.
		spans := eval[[]string](b, `[...document.querySelectorAll('#timeline .timebar span.r')].map((s) => s.className + ' | ' + s.title)`)
		if len(spans) != 2 || !strings.Contains(spans[0], "lost | Attempt 1 on doomed: lost (lease of worker doomed expired)") ||
			!strings.HasSuffix(spans[1], "| Attempt 2 on spare") {
			t.Errorf("the timeline's run spans: %q", spans)
		}
		tl := b.text("#timeline-list")
		if !strings.Contains(tl, "Attempt 1 on doomed") || !strings.Contains(tl, "Attempt 1 lost") ||
			!strings.Contains(tl, "lease of worker doomed expired") || strings.Count(tl, "Attempt 2 on spare") != 1 {
			t.Errorf("the timeline of a lost attempt:\n%s", tl)
		}
		if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
			t.Errorf("the run page scrolls sideways at %s width", vp.name)
		}
		b.screenshot("31-run-lost-" + vp.name)
	}
}
