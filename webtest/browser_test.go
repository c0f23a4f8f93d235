package webtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// screenshotDir holds the screenshots the tests take (ignored by git).
const screenshotDir = "screenshots"

// chromiumPath finds the browser, or skips the test (fails under CI=true).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RLSCHED_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("browser tests need chromium: apt-get install -y chromium (or set RLSCHED_CHROMIUM)")
	}
	t.Skip("chromium not found: apt-get install -y chromium, or set RLSCHED_CHROMIUM")
	return ""
}

// needs skips a browser test that cannot run here (-short, no binary), and
// skips or, under CI=true, fails it when chromium is missing, before
// anything is started.
func needs(t *testing.T) {
	t.Helper()
	rig.Bin(t)
	chromiumPath(t)
}

// browser is one headless chromium with a fresh profile, and one tab in it.
// It records what the page reports as errors: uncaught exceptions,
// console.error/assert calls, and browser log entries of level error other
// than failed network requests (an expected 401 or a WebSocket that is not
// offered are the server's answers, not the page's faults).
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	errs    []string
	netErrs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(b.onEvent))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b.ctx = ctx
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1440, 1000)); err != nil {
		t.Fatalf("cannot start chromium (%s): %v", exe, err)
	}
	t.Cleanup(b.checkErrors)
	return b
}

func (b *browser) onEvent(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		b.errs = append(b.errs, fmt.Sprintf("uncaught exception: %s (%s:%d)", msg, d.URL, d.LineNumber+1))
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range e.Args {
				if a.Description != "" {
					parts = append(parts, a.Description)
				} else {
					parts = append(parts, string(a.Value))
				}
			}
			b.errs = append(b.errs, "console."+string(e.Type)+": "+strings.Join(parts, " "))
		}
	case *log.EventEntryAdded:
		if e.Entry == nil || e.Entry.Level != log.EntryLevelError {
			return
		}
		line := fmt.Sprintf("%s: %s (%s)", e.Entry.Source, e.Entry.Text, e.Entry.URL)
		if e.Entry.Source == log.EntrySourceNetwork {
			b.netErrs = append(b.netErrs, line)
		} else {
			b.errs = append(b.errs, "browser log "+line)
		}
	}
}

func (b *browser) checkErrors() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.netErrs {
		b.t.Logf("network (not counted as a page error): %s", e)
	}
	if len(b.errs) > 0 {
		b.t.Errorf("the page reported %d error(s) in the console:\n  %s", len(b.errs), strings.Join(b.errs, "\n  "))
	}
}

// do runs actions, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := b.try(actions...); err != nil {
		b.fatalf("%s: %v", what, err)
	}
}

// try runs actions within the browser's 60 s bound.
func (b *browser) try(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

func (b *browser) fatalf(format string, args ...any) {
	b.t.Helper()
	b.screenshot("FAILED-" + strings.ReplaceAll(b.t.Name(), "/", "_"))
	b.t.Fatalf(format, args...)
}

func (b *browser) open(url string) {
	b.t.Helper()
	b.do("open "+url, chromedp.Navigate(url))
}

// eval evaluates js and decodes its JSON value into T.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// wait polls the JavaScript predicate js until it is truthy.
func (b *browser) wait(what string, timeout time.Duration, js string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	// A predicate that throws (an element not there yet) counts as false, so
	// it is not reported as the page's exception.
	guarded := "(() => { try { return (" + js + "); } catch (e) { return false; } })()"
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](guarded,
		chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(100*time.Millisecond)))
	if err != nil {
		b.fatalf("waiting for %s (%s): %v", what, js, err)
	}
}

// text returns the textContent of the first element matching css ("" if none).
func (b *browser) text(css string) string {
	b.t.Helper()
	q, _ := json.Marshal(css)
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%s) || {}).textContent || ""`, q))
}

// click clicks the first element matching css. A page that redraws the
// element between the lookup and the click (a live table's refresh) leaves
// the node found gone: the click is tried again on what css matches then,
// as a user's next click would land on the redrawn row.
func (b *browser) click(css string) {
	b.t.Helper()
	var err error
	for range 5 {
		if err = b.try(chromedp.Click(chromedp.CSS(css), chromedp.NodeVisible)); err == nil ||
			!strings.Contains(err.Error(), "Could not find node with given id") {
			break
		}
	}
	if err != nil {
		b.fatalf("click %s: %v", css, err)
	}
}

// typeInto replaces the value of an input by typing: it empties the field
// (with an input event, as a user deleting the text would cause) and then
// sends the keys.
func (b *browser) typeInto(css, text string) {
	b.t.Helper()
	q, _ := json.Marshal(css)
	if !eval[bool](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false; e.value = ''; e.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, q)) {
		b.fatalf("no input %s", css)
	}
	b.do("type into "+css, chromedp.SendKeys(chromedp.CSS(css), text, chromedp.NodeVisible))
}

// selectValue picks value in a <select> the way a user does (change event).
func (b *browser) selectValue(css, value string) {
	b.t.Helper()
	q, _ := json.Marshal(css)
	v, _ := json.Marshal(value)
	if !eval[bool](b, fmt.Sprintf(`(() => { const s = document.querySelector(%s); if (!s) return false; s.value = %s; s.dispatchEvent(new Event('change', {bubbles: true})); return true; })()`, q, v)) {
		b.fatalf("no select %s", css)
	}
}

// slide sets a range input to value the way a user's drag ends (input event).
func (b *browser) slide(css, value string) {
	b.t.Helper()
	q, _ := json.Marshal(css)
	v, _ := json.Marshal(value)
	if !eval[bool](b, fmt.Sprintf(`(() => { const s = document.querySelector(%s); if (!s) return false; s.value = %s; s.dispatchEvent(new Event('input', {bubbles: true})); return true; })()`, q, v)) {
		b.fatalf("no range input %s", css)
	}
}

// screenshot saves the whole page as screenshots/<name>.png.
func (b *browser) screenshot(name string) { b.shoot(name, chromedp.FullScreenshot(100)) }

// screenshotOf saves the first element css matches, at its size, where a
// full page would be too long to read.
func (b *browser) screenshotOf(name, css string) {
	b.shoot(name, chromedp.Screenshot(chromedp.CSS(css), chromedp.NodeVisible))
}

func (b *browser) shoot(name string, shot chromedp.Action[[]byte]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	// Let layout, charts and fonts settle.
	_, _ = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))`, chromedp.EvalAwaitPromise))
	buf, err := chromedp.Run(ctx, shot)
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(screenshotDir, name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot: webtest/%s", p)
}

// signIn signs in through the login form as name.
func (b *browser) signIn(base, name string) {
	b.t.Helper()
	b.open(base + "/login")
	b.wait("the login form", 15*time.Second, `document.querySelector('#username') !== null`)
	b.typeInto("#username", name)
	b.typeInto("#password", rig.Password)
	b.click("#auth-submit")
	b.wait("the runs page after signing in", 15*time.Second, `location.pathname === '/runs' && document.querySelector('#runs-table') !== null`)
}
