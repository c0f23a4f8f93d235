package webtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestAdminUsersPage: the first user (an admin) finds Users in the top
// bar, sees another user with their runs, makes them an admin and back,
// disables them (their token is refused at once), enables them again,
// resets their password, deletes them (their run stays), and adds a user;
// a plain user has no Users entry and the page says admins only. The
// workers page drains and undrains a worker.
func TestAdminUsersPage(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	s.api().signup("root") // the first user: ADMIN
	bob := s.api().signup("bob")
	run := bob.submit(map[string]any{"name": "bobs-run", "command": []string{"true"}})
	bob.waitStatus(run, "SUCCEEDED", 60*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "root")
	b.click(`.mainnav a[href="/users"]`)
	b.wait("bob in the users table", 15*time.Second, `document.querySelector('#users tr[data-user="bob"]') !== null`)
	row := b.text(`#users tr[data-user="bob"]`)
	if !strings.Contains(row, "enabled") || !strings.Contains(row, "1") {
		t.Errorf("bob's row says %q, want enabled and his 1 run", row)
	}
	b.screenshot("20-users")

	b.selectValue(`select[data-role="bob"]`, "ADMIN")
	b.wait("bob an admin", 15*time.Second, `(() => { const s = document.querySelector('select[data-role="bob"]'); return s && s.value === 'ADMIN'; })()`)
	testutil.Eventually(t, 15*time.Second, func() (bool, string) {
		st, body := bob.do("GET", "/api/auth/me", nil)
		return st == 401, fmt.Sprintf("bob's token after a role change: %d %s", st, body)
	})
	b.selectValue(`select[data-role="bob"]`, "USER")
	b.wait("bob a user again", 15*time.Second, `(() => { const s = document.querySelector('select[data-role="bob"]'); return s && s.value === 'USER'; })()`)

	bob = s.api().login("bob", rig.Password)
	b.click(`button[data-toggle="bob"]`)
	b.wait("bob disabled", 15*time.Second, `document.querySelector('#users tr[data-user="bob"][data-disabled="true"]') !== null`)
	if st, body := bob.do("GET", "/api/tasks", nil); st != 403 || !strings.Contains(string(body), "disabled") {
		t.Errorf("a disabled user's token: %d %s", st, body)
	}
	b.click(`button[data-toggle="bob"]`)
	b.wait("bob enabled", 15*time.Second, `document.querySelector('#users tr[data-user="bob"][data-disabled="false"]') !== null`)

	eval[bool](b, `(window.prompt = () => 'a-password-reset-by-root', true)`)
	b.click(`#users tr[data-user="bob"] button[data-fk^="reset-"]`)
	testutil.Eventually(t, 15*time.Second, func() (bool, string) {
		st, _ := s.api().do("POST", "/api/auth/login", map[string]string{"username": "bob", "password": "a-password-reset-by-root"})
		return st == 200, fmt.Sprintf("bob's sign-in with the new password: %d", st)
	})

	eval[bool](b, `(window.confirm = () => true, true)`)
	b.click(`button[data-delete="bob"]`)
	b.wait("bob gone", 15*time.Second, `document.querySelector('#users tr[data-user="bob"]') === null && document.querySelector('#users tr[data-user="root"]') !== null`)
	root := s.api().login("root", rig.Password)
	if tk := root.task(run); !strings.HasPrefix(tk.User, "deleted user ") {
		t.Errorf("bob's run is owned by %q after his deletion", tk.User)
	}

	b.typeInto("#new-user", "carol")
	b.typeInto("#new-password", rig.Password)
	b.click(`#add-user button[type="submit"]`)
	b.wait("carol added", 15*time.Second, `document.querySelector('#users tr[data-user="carol"]') !== null`)

	b.click(`.mainnav a[href="/workers"]`)
	b.wait("the drain button", 15*time.Second, `document.querySelector('#workers button[data-action="drain"]') !== null`)
	b.click(`#workers button[data-action="drain"]`)
	b.wait("a draining worker", 15*time.Second, `document.querySelector('#workers [data-state="DRAINING"]') !== null`)
	b.screenshot("21-workers-draining")
	b.click(`#workers button[data-action="undrain"]`)
	b.wait("the worker idle again", 15*time.Second, `document.querySelector('#workers [data-state="IDLE"]') !== null`)

	// A plain user: no Users entry, and the page says so.
	c := newBrowser(t)
	c.signIn(s.url, "carol")
	if eval[bool](c, `!document.querySelector('.mainnav a[href="/users"]').hidden`) {
		t.Error("a plain user sees Users in the top bar")
	}
	c.click(`.mainnav a[href="/workers"]`)
	c.wait("the workers page", 15*time.Second, `document.querySelector('#workers [data-worker]') !== null`)
	if eval[bool](c, `document.querySelector('#workers button') !== null`) {
		t.Error("a plain user has worker buttons")
	}
	c.open(s.url + "/users")
	c.wait("the admins-only notice", 15*time.Second, `document.querySelector('#main .notice') && document.querySelector('#main .notice').textContent.includes('Only admins')`)
}
