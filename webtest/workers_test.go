package webtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestWorkersShapes: the Workers page with workers of different shapes, up's
// local one with two GPUs and one of its own with none, each running a
// run (issue 32: "workers cards misaligned"). Side by side on a desktop
// the cards' tops, heads, resources lines and bottoms line up;
// on a phone they stack, and nothing scrolls sideways.
func TestWorkersShapes(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 2)
	s.startWorker("cpu-box", 0)
	a := s.api().signup("walt")
	gpu := a.submit(map[string]any{"name": "on-a-gpu", "gpus": 1, "command": []string{"sleep", "600"}})
	cpu := a.submit(map[string]any{"name": "on-cores", "command": []string{"sleep", "600"}})
	t.Cleanup(func() { a.cancel(gpu); a.cancel(cpu) })
	a.waitStatus(gpu, "RUNNING", 60*time.Second)
	a.waitStatus(cpu, "RUNNING", 60*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "walt")
	ready := `document.querySelectorAll('#workers section.worker[data-state]').length === 2 && document.querySelector('#workers section.worker[data-worker="cpu-box"]') !== null && document.querySelector('#workers .gpu.held') !== null`
	for _, vp := range []struct {
		name string
		act  chromedp.Action[chromedp.Void]
	}{
		{"desktop", chromedp.EmulateViewport(1400, 1000)},
		{"phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)},
	} {
		b.do(vp.name+" viewport", vp.act)
		b.open(s.url + "/workers")
		b.wait("two workers ("+vp.name+")", 30*time.Second, ready)
		if vp.name == "desktop" {
			// Each part's top, card by card: the same in both, since they
			// sit side by side.
			tops := eval[map[string][]float64](b, `(() => {
				const cards = [...document.querySelectorAll('#workers section.worker')], out = {};
				for (const part of ['.worker-head', '.worker-resources']) out[part] = cards.map((c) => { const e = c.querySelector(part); return e ? Math.round(e.getBoundingClientRect().top) : -1; });
				out.card = cards.map((c) => Math.round(c.getBoundingClientRect().top));
				out.bottom = cards.map((c) => Math.round(c.getBoundingClientRect().bottom));
				return out;
			})()`)
			for part, ys := range tops {
				if len(ys) != 2 || ys[0] != ys[1] || ys[0] < 0 {
					t.Errorf("%s at %v in the two cards, want one line", part, ys)
				}
			}
		} else if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
			t.Errorf("the workers page scrolls sideways on a phone")
		}
		b.screenshot(fmt.Sprintf("workers-shapes-%s", vp.name))
	}
}
