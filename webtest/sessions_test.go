package webtest

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// helloApp serves one page under RLSCHED_BASE_URL: a notebook's stand-in.
const helloApp = `
import http.server, os
BASE = os.environ['RLSCHED_BASE_URL']
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        b = ('<!doctype html><title>app</title><h1 id="app">hello from the app</h1><p>' + self.path + '</p>').encode()
        self.send_response(200 if self.path.startswith(BASE) else 404)
        self.send_header('Content-Type', 'text/html'); self.send_header('Content-Length', str(len(b))); self.end_headers()
        self.wfile.write(b)
http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['RLSCHED_PORT'])), H).serve_forever()
`

// TestSessionsOnTheDashboard (issue 34): the runs page lists the user's
// sessions with Attach and Open app; a notebook's run page shows its URL;
// the app opens in the browser, signed in by the dashboard's cookie,
// through the gateway; another user's browser is refused; at desktop and
// phone widths nothing scrolls sideways.
func TestSessionsOnTheDashboard(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	s.api().signup("root")
	alice := s.api().signup("alice")
	s.api().signup("bob")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	nb := alice.submit(map[string]any{"name": "my-notebook", "kind": "interactive", "port": port, "command": []string{"python3", "-c", helloApp}})
	shell := alice.submit(map[string]any{"name": "my-shell", "kind": "interactive"})
	alice.waitStatus(nb, "RUNNING", 60*time.Second)
	alice.waitStatus(shell, "RUNNING", 60*time.Second)
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		st, body := alice.do("GET", "/sessions/"+nb+"/", nil)
		return st == 200, string(body)
	})

	b := newBrowser(t)
	b.do("desktop viewport", chromedp.EmulateViewport(1400, 1000))
	b.signIn(s.url, "alice")
	b.open(s.url + "/runs")
	b.wait("both sessions listed", 20*time.Second, `document.querySelectorAll('#sessions li[data-id]').length === 2`)
	if !eval[bool](b, `!!document.querySelector('#sessions li[data-id="`+nb+`"] a[data-act="open"]') &&
		!!document.querySelector('#sessions li[data-id="`+nb+`"] a[data-act="attach"]') &&
		!document.querySelector('#sessions li[data-id="`+shell+`"] a[data-act="open"]')`) {
		t.Fatalf("the sessions card: %s", b.text("#sessions"))
	}
	b.screenshot("60-sessions")
	b.click(`#sessions li[data-id="` + shell + `"] a[data-act="attach"]`)
	b.wait("the shell's terminal", 20*time.Second, `!!document.querySelector('#terminal')`)
	b.wait("the terminal attached", 20*time.Second, `document.querySelector('#terminal-status').textContent === 'attached'`)
	b.typeInto("#terminal-input", "echo web-$((6*7))\r")
	b.wait("the typed line's output in the terminal", 20*time.Second,
		`document.querySelector('#terminal-text').textContent.includes('web-42')`)
	// Ctrl-C reaches the foreground job as SIGINT.
	b.typeInto("#terminal-input", `sh -c 'trap "echo got-int-$((2+2)); exit" INT; echo ready-$((1+2)); while :; do sleep 0.1; done'`+"\r")
	b.wait("the job running", 20*time.Second, `document.querySelector('#terminal-text').textContent.includes('ready-3')`)
	b.do("Ctrl-C", chromedp.KeyEvent("c", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
	b.wait("SIGINT to reach the job", 20*time.Second, `document.querySelector('#terminal-text').textContent.includes('got-int-4')`)

	b.open(s.url + "/runs/" + nb)
	b.wait("the app's URL and its button", 20*time.Second,
		`!!document.querySelector('#open-session') && (document.querySelector('#run-session-url')||{}).textContent.includes('/sessions/`+nb+`/')`)
	b.screenshot("61-notebook-run")
	b.open(s.url + "/sessions/" + nb + "/")
	b.wait("the app itself, through the gateway", 20*time.Second, `(document.querySelector('#app')||{}).textContent === 'hello from the app'`)

	// Another user: no sessions card, and the app is refused.
	o := newBrowser(t)
	o.signIn(s.url, "bob")
	o.open(s.url + "/sessions/" + nb + "/")
	o.wait("the refusal", 20*time.Second, `document.body.textContent.includes('only its owner')`)
	o.open(s.url + "/runs/" + nb)
	o.wait("the run page", 20*time.Second, `!!document.querySelector('#run-session-url')`)
	if eval[bool](o, `!!document.querySelector('#open-session')`) {
		t.Error("bob sees Open app on alice's notebook")
	}
	o.open(s.url + "/runs/" + shell)
	o.wait("the shell's run page", 20*time.Second, `(document.querySelector('#run-name')||{}).textContent === 'my-shell'`)
	if eval[bool](o, `!!document.querySelector('#terminal')`) {
		t.Error("bob sees the terminal of alice's shell")
	}

	// A phone.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.open(s.url + "/runs")
	b.wait("the sessions on a phone", 20*time.Second, `document.querySelectorAll('#sessions li[data-id]').length === 2`)
	if eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Error("the runs page with sessions scrolls sideways on a phone")
	}
	b.screenshot("62-sessions-phone")
	b.open(s.url + "/runs/" + nb)
	b.wait("the run page on a phone", 20*time.Second, `!!document.querySelector('#open-session')`)
	if eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
		t.Error("a notebook's run page scrolls sideways on a phone")
	}
	b.screenshot("63-notebook-run-phone")
	if got := b.text("#run-session-url"); !strings.Contains(got, "/sessions/"+nb+"/") {
		t.Errorf("the app's URL on a phone: %q", got)
	}
}
