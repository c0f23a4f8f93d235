package webtest

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestGroupRunPage (issue 29): a 2-node group on `up`'s two local workers
// runs; its run page says how many workers it spans and which ranks it
// has, and the log's rank picker shows each member's own log, at desktop
// and phone widths (nothing scrolls sideways).
func TestGroupRunPage(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, -1, "RLSCHED_WORKERS=2")
	a := s.api().signup("nell")
	id := a.submit(map[string]any{"name": "group", "nodes": 2, "command": []string{"python3", "-c",
		"import os, time; print('hello from rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], flush=True); time.sleep(600)"}})
	t.Cleanup(func() { a.cancel(id) })
	b := newBrowser(t)
	b.signIn(s.url, "nell")
	for _, vp := range []struct {
		name string
		act  chromedp.Action[chromedp.Void]
	}{
		{"desktop", chromedp.EmulateViewport(1400, 1000)},
		{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)},
	} {
		b.do(vp.name+" viewport", vp.act)
		b.open(s.url + "/runs/" + id)
		b.wait("the run's nodes", 30*time.Second, `(() => { const e = document.querySelector('#run-nodes'); return e && e.textContent.startsWith('2 workers at once') && e.textContent.includes('ranks 0–1'); })()`)
		b.wait("rank 0's log", 30*time.Second, `(() => { const p = document.querySelector('#log-rank'); return p && !p.hidden && p.options.length === 2 && document.querySelector('#log').textContent.includes('hello from rank 0 of 2'); })()`)
		b.selectValue("#log-rank", "1")
		b.wait("rank 1's log", 30*time.Second, `(() => { const t = document.querySelector('#log').textContent; return t.includes('hello from rank 1 of 2') && !t.includes('hello from rank 0'); })()`)
		if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
			t.Errorf("the group's run page scrolls sideways at %s width", vp.name)
		}
		b.screenshot("nodes-run-" + vp.name)
	}
}
