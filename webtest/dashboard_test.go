package webtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// TestSignUpSubmitWatch is the newcomer's path: create an account in the
// browser, submit a train.py run through the form (after the form rejects
// bad input inline), and watch it turn RUNNING and SUCCEEDED, its log
// lines and its reward chart appear, all without reloading the page.
func TestSignUpSubmitWatch(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	b := newBrowser(t)

	// A first visit lands on the sign-in page.
	b.open(s.url + "/")
	b.wait("the login page", 15*time.Second, `location.pathname === '/login' && document.querySelector('#auth-submit') !== null`)
	b.screenshot("01-login")

	// Register; bad input first, answered inline.
	b.click("#tab-register")
	b.typeInto("#username", "al")
	b.typeInto("#password", "short")
	b.click("#auth-submit")
	b.wait("inline sign-up errors", 10*time.Second, `document.querySelector('#username-err').textContent !== '' && document.querySelector('#password-err').textContent !== ''`)
	b.typeInto("#username", "alice")
	b.typeInto("#password", rig.Password)
	b.click("#auth-submit")
	b.wait("the runs page", 15*time.Second, `location.pathname === '/runs' && document.querySelector('#runs-table') !== null`)
	if who := b.text("#whoami"); !strings.Contains(who, "alice") {
		t.Errorf("top bar shows %q, want alice", who)
	}
	b.wait("the empty state", 10*time.Second, `document.querySelector('.empty') && !document.querySelector('.empty').hidden`)
	b.screenshot("02-runs-empty")

	// The page is never reloaded from here on: this marker would vanish.
	eval[bool](b, `window.__noReload = true`)

	// The submit form, through the top bar's button.
	b.click(`a[href="/submit"]`)
	b.wait("the submit form", 10*time.Second, `document.querySelector('#submit-form') !== null`)
	b.typeInto("#episodes", "0")
	b.click("#submit-run")
	b.wait("the inline episodes error", 10*time.Second, `document.querySelector('#episodes-err').textContent.includes('Episodes')`)
	if inv := eval[string](b, `document.querySelector('#episodes').getAttribute('aria-invalid') || ''`); inv != "true" {
		t.Errorf("episodes field not marked invalid (aria-invalid=%q)", inv)
	}
	// A mistake only the server knows: a reserved environment variable.
	b.typeInto("#episodes", "1500")
	b.click("details.more > summary")
	b.click("#add-env")
	b.typeInto("#env-rows .kvrow:last-child input:first-child", "RLSCHED_TASK_ID")
	b.typeInto("#env-rows .kvrow:last-child input:nth-child(2)", "x")
	b.click("#submit-run")
	b.wait("the API's error shown at the env field", 10*time.Second, `document.querySelector('[data-field] .err, .err') && [...document.querySelectorAll('.err')].some((e) => e.textContent.includes('set by rlsched'))`)
	b.screenshot("03-submit-validation")
	b.click("#env-rows .kvrow:last-child button")

	// Fill the form for real: PPO, params, metadata.
	b.typeInto("#algorithm", "PPO")
	b.typeInto("#learningRate", "0.01")
	b.click("#add-param")
	b.typeInto("#params-rows .kvrow:last-child .param-key", "seed")
	b.typeInto("#params-rows .kvrow:last-child .param-value", "3")
	b.typeInto("#name", "ppo-from-form")
	b.typeInto("#project", "cartpole")
	b.typeInto("#tags", "ui, smoke")
	b.screenshot("04-submit-form")
	b.click("#submit-run")
	b.wait("the run page", 15*time.Second, `location.pathname.startsWith('/runs/') && document.querySelector('#run-name') !== null`)
	id := strings.TrimPrefix(eval[string](b, `location.pathname`), "/runs/")
	if name := b.text("#run-name"); name != "ppo-from-form" {
		t.Errorf("run page names the run %q, want ppo-from-form", name)
	}

	// RUNNING, with log lines and chart points arriving live.
	b.wait("status RUNNING", 60*time.Second, `document.querySelector('#stat-status .badge').dataset.status === 'RUNNING'`)
	b.wait("log lines", 30*time.Second, `[...document.querySelectorAll('#log .logview .ln .tx')].some((e) => e.textContent.startsWith('episode '))`)
	b.wait("reward chart points", 30*time.Second, `(() => { const p = document.querySelector('[data-chart="episode_reward"] path.line[data-points]'); return p && Number(p.dataset.points) > 0; })()`)
	b.screenshot("05-run-running")

	// SUCCEEDED, still the same page.
	b.wait("status SUCCEEDED", 120*time.Second, `document.querySelector('#stat-status .badge').dataset.status === 'SUCCEEDED'`)
	b.wait("the complete log", 30*time.Second, `document.querySelector('#log-info').dataset.state === 'eof'`)
	if !eval[bool](b, `window.__noReload === true`) {
		t.Fatal("the page was reloaded while watching the run")
	}
	if got := b.text("#final-reward"); got == "" || got == "—" {
		t.Errorf("final reward shows %q", got)
	}
	if cmd := b.text("#command"); !strings.Contains(cmd, "--algo PPO") || !strings.Contains(cmd, "--episodes 1500") || !strings.Contains(cmd, "--seed 3") {
		t.Errorf("command shows %q", cmd)
	}
	pts := eval[int](b, `Number(document.querySelector('[data-chart="episode_reward"] path.line[data-points]').dataset.points)`)
	if pts < 1000 {
		t.Errorf("the reward chart has %d points, want 1500", pts)
	}
	b.wait("the last log line", 10*time.Second, `[...document.querySelectorAll('#log .logview .ln .tx')].some((e) => e.textContent.startsWith('FINAL_REWARD:'))`)
	b.screenshot("06-run-succeeded")

	// The runs table shows it, with its reward, live.
	b.click(`.mainnav a[href="/runs"]`)
	b.wait("the run in the table", 10*time.Second, fmt.Sprintf(`document.querySelector('#runs-table tr[data-id=%q][data-status="SUCCEEDED"]') !== null`, id))
	if !eval[bool](b, `window.__noReload === true`) {
		t.Fatal("the page was reloaded")
	}

	// Sign out ends the session.
	b.click("#signout")
	b.wait("the login page after signing out", 10*time.Second, `location.pathname === '/login'`)
	b.open(s.url + "/runs")
	b.wait("the login page for a signed-out visitor", 10*time.Second, `location.pathname === '/login'`)
}

// TestCompareRuns selects two seeds of one config on the Runs page, compares
// their curves, groups them into mean ± std, and reads the runs table (a row
// per run, the params that differ as columns).
func TestCompareRuns(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("bob")
	var ids []string
	for _, seed := range []int{1, 2} {
		ids = append(ids, a.submit(map[string]any{"name": fmt.Sprintf("reinforce-cartpole-long-baseline-name-s%d", seed), "project": "cmp",
			"algorithm": "REINFORCE", "episodes": 120, "params": map[string]any{"seed": seed}}))
	}
	other := a.submit(map[string]any{"name": "ppo-s1", "project": "cmp", "algorithm": "PPO", "episodes": 120, "params": map[string]any{"seed": 1}})
	for _, id := range append(ids, other) {
		a.waitStatus(id, "SUCCEEDED", 90*time.Second)
	}

	b := newBrowser(t)
	b.signIn(s.url, "bob")
	b.wait("three finished runs", 15*time.Second, `document.querySelectorAll('#runs-table tr[data-status="SUCCEEDED"]').length === 3`)
	for _, id := range append(ids, other) {
		b.click(fmt.Sprintf(`#runs-table tr[data-id=%q] input[type=checkbox]`, id))
	}
	b.wait("the selection bar", 5*time.Second, `!document.querySelector('.selection-bar').hidden`)
	b.screenshot("07-runs-selected")
	b.click("#compare-selected")
	b.wait("three curves", 20*time.Second, `[...document.querySelectorAll('[data-chart="compare:episode_reward"] path.line[data-points]')].filter((p) => Number(p.dataset.points) > 0).length === 3`)
	if m := eval[string](b, `document.querySelector('#metric-select').value`); m != "episode_reward" {
		t.Errorf("metric %q, want episode_reward", m)
	}
	// The runs table: a row per run, the seed a column marked as differing.
	b.wait("the runs table", 5*time.Second, `document.querySelectorAll('#params-diff tbody tr[data-id]').length === 3 && document.querySelector('#params-diff th[data-key="param seed"]') !== null`)
	if !eval[bool](b, `document.querySelector('#params-diff th[data-key="param seed"]').classList.contains('differs')`) {
		t.Error("the seed column is not marked as differing")
	}
	// Group: the two REINFORCE seeds fold into one mean with a band.
	b.selectValue("#group-by", "seed")
	b.wait("a mean ± std band", 10*time.Second, `document.querySelectorAll('[data-chart="compare:episode_reward"] path.band').length === 1 && document.querySelectorAll('[data-chart="compare:episode_reward"] path.line[data-points]').length === 2`)
	if g := b.text("#groups-info"); !strings.Contains(g, "2 seeds") {
		t.Errorf("group description %q, want 2 seeds", g)
	}
	// The table: a row per group; a group, its chips and its rows share a
	// colour, and the two groups' colours differ.
	b.wait("a row per group", 5*time.Second, `document.querySelectorAll('#params-diff tbody tr[data-group]').length === 2 && document.querySelector('#params-diff tbody tr[data-group][data-runs="2"]') !== null && !document.querySelector('#params-diff tbody tr[data-id]')`)
	colours := eval[map[string]string](b, `(() => {
		const sw = (el) => el.querySelector('.swatch').style.background;
		const out = {};
		for (const c of document.querySelectorAll('.chip[data-id]')) out['chip ' + c.dataset.id] = sw(c);
		for (const r of document.querySelectorAll('#params-diff tbody tr[data-group]')) out['row ' + r.dataset.runs] = sw(r);
		return out;
	})()`)
	if colours["chip "+ids[0]] != colours["chip "+ids[1]] || colours["chip "+ids[0]] != colours["row 2"] ||
		colours["chip "+other] != colours["row 1"] || colours["row 1"] == colours["row 2"] || colours["row 1"] == "" {
		t.Errorf("colours of the groups, their chips and rows: %v", colours)
	}
	if g := b.text(`#params-diff tbody tr[data-runs="2"] td[data-key="final reward"]`); !strings.Contains(g, "±") {
		t.Errorf("a group's final reward %q, want mean ± std", g)
	}
	b.slide("#compare-smooth", "0.9")
	b.wait("smoothed curves", 5*time.Second, `location.search.includes('smooth=0.9') && document.querySelector('[data-chart="compare:episode_reward"] path.line.raw') !== null`)
	b.screenshot("08-compare")
	// Its first column stays in sight when the table scrolls sideways.
	if left := eval[float64](b, `(() => {
		const w = document.querySelector('#params-diff');
		w.style.width = '360px';
		w.scrollLeft = 10000;
		const d = w.querySelector('tbody td.run-cell').getBoundingClientRect().left - w.getBoundingClientRect().left;
		w.style.width = ''; w.scrollLeft = 0;
		return d;
	})()`); left < -1 || left > 2 {
		t.Errorf("the table's first column is %.0f px from its left edge after scrolling sideways; want it kept in sight", left)
	}
	// On a phone: the chips do not overlap, no legend label is cut, and
	// nothing scrolls sideways.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.open(s.url + "/compare?by=seed&ids=" + strings.Join(append(ids, other), ","))
	b.wait("three runs on a phone", 20*time.Second, `document.querySelectorAll('.chip[data-id] .badge').length === 3 && document.querySelectorAll('[data-chart="compare:episode_reward"] .legend button').length === 2`)
	if bad := eval[[]string](b, `(() => {
		const out = [];
		const cs = [...document.querySelectorAll('.chip[data-id]')].map((c) => [c.dataset.id, c.getBoundingClientRect()]);
		for (let i = 0; i < cs.length; i++) {
			const [a, r] = cs[i];
			if (r.left < 0 || r.right > window.innerWidth) out.push('chip ' + a + ' leaves the screen');
			for (let j = i + 1; j < cs.length; j++) {
				const q = cs[j][1];
				if (r.left < q.right - 1 && q.left < r.right - 1 && r.top < q.bottom - 1 && q.top < r.bottom - 1) out.push('chips ' + a + ' and ' + cs[j][0] + ' overlap');
			}
		}
		for (const c of document.querySelectorAll('.chip[data-id]')) for (const k of c.children) {
			const r = k.getBoundingClientRect(), p = c.getBoundingClientRect();
			if (r.right > p.right + 1 || r.bottom > p.bottom + 1) out.push('a part of chip ' + c.dataset.id + ' sticks out');
		}
		for (const l of document.querySelectorAll('.legend button .lbl')) if (l.scrollWidth > l.clientWidth + 1 || l.getBoundingClientRect().right > window.innerWidth) out.push('legend label cut: ' + l.textContent);
		if (document.documentElement.scrollWidth > window.innerWidth + 1) out.push('the page scrolls sideways');
		return out;
	})()`); len(bad) > 0 {
		t.Errorf("the compare page on a phone: %v", bad)
	}
	b.screenshot("08-compare-phone")
	b.do("desktop viewport", chromedp.EmulateViewport(1440, 1000))

	// A shared link compares its own runs and leaves the Runs page's
	// selection as the reader ticked it: clear it, tick one, open a link.
	b.open(s.url + "/runs")
	b.wait("the selection bar", 10*time.Second, `!document.querySelector('.selection-bar').hidden`)
	b.click(".selection-bar .btn-ghost")
	b.click(fmt.Sprintf(`#runs-table tr[data-id=%q] input[type=checkbox]`, other))
	b.open(s.url + "/compare?ids=" + ids[0] + "," + ids[1])
	b.wait("the link's two runs", 20*time.Second, `document.querySelectorAll('.chip[data-id]').length === 2`)
	b.open(s.url + "/runs")
	b.wait("the runs table", 10*time.Second, `document.querySelector('#runs-table tr[data-id]') !== null`)
	if n := eval[int](b, `document.querySelectorAll('#runs-table input[type=checkbox]:checked').length`); n != 1 {
		t.Errorf("%d runs selected after opening a compare link; want the 1 ticked", n)
	}

	// Edit & resubmit fills the form from a run.
	b.open(s.url + "/runs/" + ids[1])
	b.wait("the run page", 10*time.Second, `document.querySelector('a[href^="/submit?from="]') !== null`)
	b.click(`a[href^="/submit?from="]`)
	b.wait("the prefilled form", 10*time.Second, `document.querySelector('#algorithm').value === 'REINFORCE' && document.querySelector('#episodes').value === '120' && document.querySelector('#params-rows .param-key') && document.querySelector('#params-rows .param-key').value === 'seed'`)
	if v := eval[string](b, `document.querySelector('#params-rows .param-value').value`); v != "2" {
		t.Errorf("the seed param is prefilled as %q, want 2", v)
	}
	if v := eval[string](b, `document.querySelector('#project').value`); v != "cmp" {
		t.Errorf("the project is prefilled as %q, want cmp", v)
	}
}

// TestCancelLongRun cancels a `sleep 600` run from its page.
func TestCancelLongRun(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("carol")
	s.api().signup("dave") // someone who may not cancel it
	id := a.submit(map[string]any{"name": "sleeper", "command": []string{"sleep", "600"}})
	t.Cleanup(func() { a.cancel(id) })
	a.waitStatus(id, "RUNNING", 60*time.Second)

	b := newBrowser(t)
	// Another user sees no cancel button.
	b.signIn(s.url, "dave")
	b.open(s.url + "/runs/" + id)
	b.wait("the run page", 15*time.Second, `document.querySelector('#stat-status .badge') !== null && document.querySelector('#rerun') !== null`)
	if eval[bool](b, `document.querySelector('#cancel-run') !== null`) {
		t.Error("a user who neither owns the run nor is an admin is offered Cancel")
	}
	b.click("#signout")
	b.wait("signed out", 10*time.Second, `location.pathname === '/login'`)

	b.signIn(s.url, "carol")
	b.open(s.url + "/runs/" + id)
	b.wait("RUNNING on its page", 15*time.Second, `document.querySelector('#stat-status .badge') && document.querySelector('#stat-status .badge').dataset.status === 'RUNNING'`)
	b.wait("the cancel button", 5*time.Second, `document.querySelector('#cancel-run') !== null`)
	b.click("#cancel-run")
	b.wait("the confirmation", 5*time.Second, `document.querySelector('#confirm-cancel') !== null`)
	b.screenshot("09-run-cancel-confirm")
	b.click("#confirm-cancel")
	b.wait("status CANCELLED", 30*time.Second, `document.querySelector('#stat-status .badge').dataset.status === 'CANCELLED'`)
	if eval[bool](b, `document.querySelector('#cancel-run') !== null`) {
		t.Error("a cancelled run still offers Cancel")
	}
	if st := a.task(id).Status; st != "CANCELLED" {
		t.Errorf("the API says %s, want CANCELLED", st)
	}
	b.screenshot("10-run-cancelled")

	// Rerun: a new run with the same command, on its own page.
	b.click("#rerun")
	b.wait("the rerun's page", 15*time.Second, fmt.Sprintf(`location.pathname.startsWith('/runs/') && location.pathname !== '/runs/%s' && document.querySelector('#command') !== null`, id))
	rerun := strings.TrimPrefix(eval[string](b, `location.pathname`), "/runs/")
	t.Cleanup(func() { a.cancel(rerun) })
	if cmd := b.text("#command"); cmd != "sleep 600" {
		t.Errorf("the rerun runs %q, want sleep 600", cmd)
	}
	b.wait("the rerun RUNNING", 60*time.Second, `document.querySelector('#stat-status .badge').dataset.status === 'RUNNING'`)
}

// TestWorkersShowHeldGPU runs a one-GPU job on a two-GPU worker and finds
// its tile on the Workers page, live; a three-GPU run waits with a reason.
func TestWorkersShowHeldGPU(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 2)
	a := s.api().signup("erin")
	b := newBrowser(t)
	b.signIn(s.url, "erin")
	b.click(`.mainnav a[href="/workers"]`)
	b.wait("two free GPU tiles", 15*time.Second, `document.querySelectorAll('#workers .gpu').length === 2 && document.querySelectorAll('#workers .gpu.held').length === 0`)

	id := a.submit(map[string]any{"name": "gpu-sleeper", "command": []string{"sleep", "600"}, "gpus": 1})
	t.Cleanup(func() { a.cancel(id) })
	tk := a.waitStatus(id, "RUNNING", 60*time.Second)
	b.wait("the held GPU tile", 15*time.Second, fmt.Sprintf(`document.querySelector('#workers .gpu.held[data-task=%q]') !== null`, id))
	// The tile follows the run's status live, not the status it was first loaded with.
	b.wait("the tile saying running", 15*time.Second, fmt.Sprintf(`(() => { const e = document.querySelector('#workers .gpu.held[data-task=%q] .user'); return e && e.textContent.includes('running'); })()`, id))
	tile := b.text(fmt.Sprintf(`#workers .gpu.held[data-task=%q]`, id))
	if !strings.Contains(tile, "gpu-sleeper") || !strings.Contains(tile, "erin") {
		t.Errorf("the GPU tile says %q, want the run's name and its user", tile)
	}
	if len(tk.GPUIndices) != 1 || !strings.Contains(tile, fmt.Sprintf("GPU %d", tk.GPUIndices[0])) {
		t.Errorf("the tile %q does not name GPU %v", tile, tk.GPUIndices)
	}
	b.screenshot("11-workers")

	// A run needing more GPUs than any worker has waits, and says why.
	big := a.submit(map[string]any{"name": "too-big", "command": []string{"true"}, "gpus": 3})
	t.Cleanup(func() { a.cancel(big) })
	b.click(`.mainnav a[href="/runs"]`)
	b.wait("the queued run's reason", 15*time.Second, fmt.Sprintf(`(() => { const r = document.querySelector('#runs-table tr[data-id=%q] .queue-info'); return r && r.textContent.includes('needs 3 GPUs'); })()`, big))
	if info := b.text(fmt.Sprintf(`#runs-table tr[data-id=%q] .queue-info`, big)); !strings.Contains(info, "in queue") {
		t.Errorf("queue info %q lacks the position", info)
	}
	b.screenshot("12-runs-queued")
	// Its own page says the same, in the status card and the timeline.
	b.click(fmt.Sprintf(`#runs-table tr[data-id=%q] td.name a`, big))
	b.wait("the queued run's page", 15*time.Second, `(() => { const d = document.querySelector('#status-detail'); return d && d.textContent.includes('in queue') && d.textContent.includes('needs 3 GPUs'); })()`)
	b.screenshot("12b-run-queued")

	// Cancelling frees the tile without a reload.
	b.click(`.mainnav a[href="/workers"]`)
	b.wait("the held tile again", 10*time.Second, `document.querySelectorAll('#workers .gpu.held').length === 1`)
	a.cancel(id)
	b.wait("the GPU freed", 30*time.Second, `document.querySelectorAll('#workers .gpu.held').length === 0`)
}

// TestMillionLineLog opens the page of a run that printed a million lines:
// the page stays responsive, keeps only the rows in view in the DOM, and
// reaches the last line.
func TestMillionLineLog(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("frank")
	id := a.submit(map[string]any{"name": "chatty", "command": []string{"python3", "-c",
		"import sys\nw = sys.stdout.write\nfor i in range(1000000): w('line %d of a long log\\n' % i)\n"}})
	a.waitStatus(id, "SUCCEEDED", 120*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "frank")
	start := time.Now()
	b.open(s.url + "/runs/" + id)
	b.wait("the run page", 15*time.Second, `document.querySelector('#log-info') !== null`)
	// While the log loads the page answers quickly: five probes spread over
	// the first second of the load (the sleep spaces them; it orders nothing).
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		eval[int](b, `document.querySelectorAll('#log .ln').length`)
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("the page took %v to answer while loading the log", d)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b.wait("the whole log", 90*time.Second, `document.querySelector('#log-info').dataset.state === 'eof'`)
	t.Logf("a million lines loaded in %v", time.Since(start).Round(time.Millisecond))
	b.wait("the last line in view", 10*time.Second, `[...document.querySelectorAll('#log .ln .tx')].some((e) => e.textContent === 'line 999999 of a long log')`)
	if rows := eval[int](b, `document.querySelectorAll('#log .ln').length`); rows > 300 {
		t.Errorf("%d log rows in the DOM; the view should hold only those in sight", rows)
	}
	if info := b.text("#log-info"); !strings.Contains(info, "1,000,001 lines") {
		t.Errorf("log info %q, want 1,000,001 lines (the TRACE_ID line and a million)", info)
	}
	// Scrolling to the top shows the first lines and stops following.
	eval[bool](b, `(() => { const v = document.querySelector('#log .logview'); v.dispatchEvent(new WheelEvent('wheel', {deltaY: -100})); v.scrollTop = 0; return true; })()`)
	b.wait("the first lines", 10*time.Second, `[...document.querySelectorAll('#log .ln .tx')].some((e) => e.textContent.startsWith('TRACE_ID:'))`)
	b.wait("the follow button", 5*time.Second, `!document.querySelector('#follow').hidden`)
	b.screenshot("13-run-million-lines")
}

// TestHealthAndResponsive checks the Health page and the Runs page on a
// phone-sized screen.
func TestHealthAndResponsive(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 1)
	a := s.api().signup("gina")
	id := a.submit(map[string]any{"name": "quick", "algorithm": "PPO", "episodes": 50, "project": "mobile",
		"params": map[string]any{"lr": 0.00021056337053284956}})
	a.waitStatus(id, "SUCCEEDED", 90*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "gina")
	b.wait("the runs table", 10*time.Second, `document.querySelector('#runs-table tr[data-id]') !== null`)
	if n := eval[int](b, `[...document.querySelectorAll('main .stat-strip, main a[href="/submit"]')].filter((e) => e.offsetParent !== null).length`); n != 0 {
		t.Errorf("the Runs page has %d ops cards or New run buttons of its own; want them on Health and in the top bar only", n)
	}
	// Param columns, chosen by the reader and kept in this browser.
	b.click("details.filters-more summary")
	b.typeInto("#runs-columns", "lr")
	b.wait("the lr column, to 4 significant digits", 10*time.Second, fmt.Sprintf(`(() => { const c = document.querySelector('#runs-table tr[data-id=%q] td[data-param="lr"]'); return !!c && c.textContent === '0.0002106' && c.title === '0.00021056337053284956'; })()`, id))
	// A metric column: the run's last episode_reward.
	b.typeInto("#runs-metric-columns", "episode_reward")
	b.wait("the episode_reward column", 10*time.Second, fmt.Sprintf(`(() => { const c = document.querySelector('#runs-table tr[data-id=%q] td[data-metric="episode_reward"]'); return !!c && /^-?[0-9.,]+$/.test(c.textContent) && c.title === 'episode_reward at step 50'; })()`, id))
	// The run's reward curve, thinned by the server.
	b.wait("the reward curve", 10*time.Second, fmt.Sprintf(`(() => { const p = document.querySelector('#runs-table tr[data-id=%q] .spark-cell svg.spark path'); return !!p && Number(p.dataset.points) > 10; })()`, id))
	b.click(`.mainnav a[href="/health"]`)
	b.wait("the health page", 10*time.Second, `document.querySelector('#health-status .badge') && document.querySelector('#health-status .badge').dataset.status === 'UP' && document.querySelector('main [data-stat="gpus"]') !== null`)
	b.screenshot("14-health")

	// Keyboard: g r goes to the runs, j focuses the first run's link.
	b.do("keys g r", chromedp.KeyEvent("gr"))
	b.wait("the runs page by keyboard", 5*time.Second, `location.pathname === '/runs' && document.querySelector('#runs-table tr[data-id]') !== null`)
	b.do("key j", chromedp.KeyEvent("j"))
	if !eval[bool](b, `document.activeElement && document.activeElement.matches('#runs-table tr[data-id] .name a')`) {
		t.Error("j did not focus the first run")
	}

	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	b.open(s.url + "/runs")
	b.wait("the runs table", 10*time.Second, fmt.Sprintf(`document.querySelector('#runs-table tr[data-id=%q]') !== null`, id))
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		t.Error("the runs page scrolls sideways on a phone")
	}
	// Every page of the nav is in sight on a phone, and the runs table's
	// columns fit the screen (the final reward too).
	if hidden := eval[[]string](b, `[...document.querySelectorAll('.mainnav a:not([hidden])')].filter((a) => { const r = a.getBoundingClientRect(); return r.right > window.innerWidth || r.width === 0; }).map((a) => a.textContent)`); len(hidden) > 0 {
		t.Errorf("nav items out of sight on a phone: %v", hidden)
	}
	if over := eval[bool](b, `(() => { const w = document.querySelector('#runs-table').closest('.table-wrap'); return w.scrollWidth > w.clientWidth + 1; })()`); over {
		t.Error("the runs table scrolls sideways on a phone")
	}
	b.screenshot("15-runs-phone")
	b.open(s.url + "/runs/" + id)
	b.wait("the run page", 10*time.Second, `document.querySelector('#log-info') && document.querySelector('#log-info').dataset.state === 'eof'`)
	if over := eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		t.Error("the run page scrolls sideways on a phone")
	}
	b.screenshot("16-run-phone")

	// The dark colour scheme, on a desktop.
	b.do("desktop viewport", chromedp.EmulateViewport(1440, 1000))
	if _, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		t.Fatal(err)
	}
	b.open(s.url + "/runs/" + id)
	b.wait("the run page", 10*time.Second, `document.querySelector('#log-info') && document.querySelector('#log-info').dataset.state === 'eof' && document.querySelector('[data-chart="episode_reward"] path.line[data-points]') !== null`)
	b.screenshot("18-run-dark")
	b.click(`.mainnav a[href="/runs"]`)
	b.wait("the runs table", 10*time.Second, fmt.Sprintf(`document.querySelector('#runs-table tr[data-id=%q]') !== null`, id))
	b.screenshot("19-runs-dark")
}

// TestPollingFallback takes the WebSocket away (as when /ws is down or a
// proxy drops upgrades): the pages say so and keep up by polling REST.
func TestPollingFallback(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("hana")
	b := newBrowser(t)
	// Every WebSocket this page opens closes at once.
	if _, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		window.WebSocket = class {
			constructor() { this.readyState = 3; setTimeout(() => this.onclose && this.onclose({ code: 1006 }), 10); }
			send() {} close() {}
		};`}); err != nil {
		t.Fatal(err)
	}
	b.signIn(s.url, "hana")
	b.wait("the polling indicator", 10*time.Second, `document.querySelector('#live-indicator').classList.contains('polling')`)
	eval[bool](b, `window.__noReload = true`)

	id := a.submit(map[string]any{"name": "slow-hello", "command": []string{"python3", "-u", "-c",
		"import time\nprint('hello from the run')\ntime.sleep(4)\nprint('bye from the run')\n"}})
	b.wait("the new run in the table", 15*time.Second, fmt.Sprintf(`document.querySelector('#runs-table tr[data-id=%q]') !== null`, id))
	b.click(fmt.Sprintf(`#runs-table tr[data-id=%q] .name a`, id))
	b.wait("RUNNING by polling", 30*time.Second, `document.querySelector('#stat-status .badge').dataset.status === 'RUNNING'`)
	b.wait("the first line by polling", 15*time.Second, `[...document.querySelectorAll('#log .ln .tx')].some((e) => e.textContent === 'hello from the run')`)
	if st := eval[string](b, `document.querySelector('#log-info').dataset.state`); st != "polling" && st != "eof" {
		t.Errorf("log state %q, want polling", st)
	}
	b.wait("SUCCEEDED by polling", 30*time.Second, `document.querySelector('#stat-status .badge').dataset.status === 'SUCCEEDED'`)
	b.wait("the last line", 15*time.Second, `[...document.querySelectorAll('#log .ln .tx')].some((e) => e.textContent === 'bye from the run')`)
	b.wait("the complete log", 15*time.Second, `document.querySelector('#log-info').dataset.state === 'eof'`)
	if n := eval[int](b, `[...document.querySelectorAll('#log .ln .tx')].filter((e) => e.textContent === 'hello from the run').length`); n != 1 {
		t.Errorf("the first line shows %d times, want once", n)
	}
	if !eval[bool](b, `window.__noReload === true`) {
		t.Fatal("the page was reloaded")
	}
	b.screenshot("17-run-polling")
}

// TestSignInRedirectStaysOnSite (issues 12, 25): the page a sign-in returns to
// (?next=) is a path of this site only. Tricks that a naive "starts with /,
// not //" check lets through (a backslash, a tab or newline that the URL
// parser drops, their percent-escapes) land on /runs instead of another
// host; a real path of the site is honoured.
func TestSignInRedirectStaysOnSite(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	s.api().signup("hugo")
	b := newBrowser(t)
	for _, next := range []string{`/\evil.example/`, `/%5Cevil.example/`, `/%09/evil.example/`, `/%0A/evil.example/`,
		`//evil.example/`, `/%2F/evil.example/`, `https://evil.example/`, `/%5C%5Cevil.example`, `%2F%2Fevil.example`,
		`/.//evil.example/`, `/%2E//evil.example/`, `/a/..//evil.example/`, `/%2e%2e//evil.example/`} {
		b.open(s.url + "/login?next=" + strings.ReplaceAll(strings.ReplaceAll(next, `\`, `%5C`), "\t", "%09"))
		b.wait("the login form", 15*time.Second, `document.querySelector('#username') !== null && location.pathname === '/login'`)
		b.typeInto("#username", "hugo")
		b.typeInto("#password", rig.Password)
		b.click("#auth-submit")
		b.wait("the runs page", 15*time.Second, fmt.Sprintf(`location.origin === %q && location.pathname === '/runs'`, s.url))
		// Sign out again for the next case.
		b.click("#signout")
		b.wait("the login page after signing out", 10*time.Second, `location.pathname === '/login'`)
	}
	b.open(s.url + "/login?next=" + "%2Fhealth")
	b.wait("the login form", 15*time.Second, `document.querySelector('#username') !== null`)
	b.typeInto("#username", "hugo")
	b.typeInto("#password", rig.Password)
	b.click("#auth-submit")
	b.wait("the page named by next", 15*time.Second, fmt.Sprintf(`location.origin === %q && location.pathname === '/health'`, s.url))
	// Signed in already, the sign-in page forwards to next at once: the
	// same check holds there.
	b.open(s.url + "/login?next=" + "/.//evil.example/")
	b.wait("the runs page for a visitor signed in", 15*time.Second, fmt.Sprintf(`location.origin === %q && location.pathname === '/runs'`, s.url))
}

// TestSignedOutNavigation (issue 32): a signed-out browser that opens a
// dashboard path at the gateway (up's URL) gets the sign-in page, not a
// JSON error, and signing in returns it to that path: a page of the
// dashboard, or the dashboard's "Page not found" for an unknown one, as
// the master's own dashboard does.
func TestSignedOutNavigation(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	s.api().signup("ida")
	b := newBrowser(t)
	for _, c := range []struct{ path, ready string }{
		{"/no-such-page?x=1", `document.querySelector('#main .empty') !== null && document.querySelector('#main .empty').textContent.includes('Page not found') && document.querySelector('.mainnav a[href="/runs"]').offsetParent !== null`},
		{"/queue", `document.querySelector('#queue') !== null`},
	} {
		b.open(s.url + c.path)
		b.wait("the sign-in page for "+c.path, 15*time.Second, `document.querySelector('#username') !== null && location.pathname === '/login'`)
		b.typeInto("#username", "ida")
		b.typeInto("#password", rig.Password)
		b.click("#auth-submit")
		b.wait(c.path+" after signing in", 15*time.Second, fmt.Sprintf(`location.pathname + location.search === %q && %s`, c.path, c.ready))
		b.click("#signout")
		b.wait("the login page after signing out", 10*time.Second, `location.pathname === '/login'`)
	}
}
