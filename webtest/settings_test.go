package webtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestSettingsPage: a user changes their own password (a wrong current
// one is said at the field), makes a token for scripts that the API takes,
// and sets, tests and turns off their webhook, at desktop and phone widths.
func TestSettingsPage(t *testing.T) {
	needs(t)
	t.Parallel()
	var mu sync.Mutex
	var got []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	defer hook.Close()
	s := startUp(t, 0, "NOTIFY_ALLOW_HOSTS=127.0.0.1")
	s.api().signup("sara")
	b := newBrowser(t)
	b.signIn(s.url, "sara")
	b.click(`.mainnav a[href="/settings"]`)
	b.wait("the settings page", 10*time.Second, `document.querySelector('#settings-password') !== null && document.querySelector('#hook-state').textContent.includes('No webhook')`)
	b.wait("what the user's outputs keep", 10*time.Second, `document.querySelector('#outputs-kept').textContent.includes('keep 0 B of the 1.0 TiB this server allows you')`)

	b.typeInto("#pw-current", "not-my-password")
	b.typeInto("#pw-new", "a-brand-new-password")
	b.typeInto("#pw-again", "a-brand-new-password")
	b.click("#pw-save")
	b.wait("the wrong current password said", 10*time.Second, `document.querySelector('#pw-err').textContent.includes('not your current password')`)
	b.typeInto("#pw-current", rig.Password)
	b.click("#pw-save")
	b.wait("the change done", 10*time.Second, `document.querySelector('#pw-err').textContent === '' && document.querySelector('#pw-current').value === ''`)
	// Still signed in (a new cookie), and the new password is the one.
	b.open(s.url + "/runs")
	b.wait("still signed in", 10*time.Second, `location.pathname === '/runs' && document.querySelector('#runs-table') !== null`)
	b.open(s.url + "/settings")
	b.wait("the settings page again", 10*time.Second, `document.querySelector('#hook-state').textContent.includes('No webhook')`)
	if st, body := s.api().do("POST", "/api/auth/login", map[string]string{"username": "sara", "password": "a-brand-new-password"}); st != 200 {
		t.Fatalf("the new password: %d %s", st, body)
	}

	b.click("#token-new")
	b.wait("a token", 10*time.Second, `!document.querySelector('#token-out').hidden && document.querySelector('#token-out').value.length > 20`)
	tok := eval[string](b, `document.querySelector('#token-out').value`)
	req, _ := http.NewRequest("GET", s.url+"/api/auth/me", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("the page's token at the API: %v %v", res, err)
	}
	res.Body.Close()

	b.typeInto("#hook-url", hook.URL+"/hook")
	b.typeInto("#hook-on", "FAILED")
	b.click("#hook-save")
	b.wait("the webhook saved", 10*time.Second, `document.querySelector('#hook-state').textContent.includes('/hook of FAILED')`)
	b.click("#hook-test")
	testutil.WaitFor(t, 10*time.Second, "the test message at the webhook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	mu.Lock()
	if len(got) != 1 || !strings.Contains(got[0], "sara") {
		t.Errorf("the test message: %q", got)
	}
	mu.Unlock()
	b.screenshot("40-settings")
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.open(s.url + "/settings")
	b.wait("the settings page on a phone", 10*time.Second, `document.querySelector('#hook-state').textContent.includes('/hook')`)
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		t.Error("the settings page scrolls sideways on a phone")
	}
	b.screenshot("41-settings-phone")
	b.click("#hook-off")
	b.wait("notifications off", 10*time.Second, `document.querySelector('#hook-state').textContent.includes('No webhook')`)
	var n struct {
		Webhook string `json:"webhook"`
	}
	_, body := s.api().login("sara", "a-brand-new-password").do("GET", "/api/auth/me/notifications", nil)
	if json.Unmarshal(body, &n) != nil || n.Webhook != "" {
		t.Errorf("notifications after Turn off: %s", body)
	}
}
