package leasetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// token is one fencing token ever handed out, and what the test knows of it.
type token struct {
	task  string
	fence uint64
	// expires is the earliest time its lease can run out, expiresLate the
	// latest, on the model's clock (equal on an exact clock; on real time
	// they bracket the unknown moment the backend took the call).
	expires, expiresLate time.Duration
	// dead: it can never be renewed or released again (released, reaped,
	// replaced by a newer claim, or seen expired). An expired token may
	// still be reaped once.
	dead bool
	// gone: dead and no longer in the store (released, reaped, replaced),
	// so neither Get nor Reap may return it.
	gone bool
}

// randomModel is what the property test knows. On an exact clock its clock
// is the sum of the Advance calls. On real time it reads the wall clock
// before each call, so a loaded machine that oversleeps or stalls a call
// cannot fool it: "expired" is trusted only past the latest possible
// expiry, "live" only margin before the earliest.
type randomModel struct {
	t       *testing.T
	b       Backend
	ttl     time.Duration
	margin  time.Duration
	now     time.Duration
	exact   bool
	start   time.Time
	rnd     *rand.Rand
	tokens  []*token
	byFence map[uint64]*token
	latest  map[string]*token // the last successful claim of each run
	top     uint64            // highest token handed out or ensured
}

// testRandomOps runs random claims, renewals, releases, reaps, reads and
// clock moves, and checks every result against the model: a run never has
// two live leases, tokens never repeat and only grow, a dead token never
// comes back, and expiry happens when the TTL says.
func testRandomOps(t *testing.T, h Harness) {
	const seed = 20250101
	m := &randomModel{
		t: t, b: h.open(t), ttl: h.TTL,
		rnd:     rand.New(rand.NewPCG(seed, seed)),
		byFence: map[uint64]*token{},
		latest:  map[string]*token{},
	}
	m.exact, m.start = h.ExactClock, time.Now()
	if !h.ExactClock {
		m.margin = h.TTL / 4
	}
	for step := range h.RandomSteps {
		m.now = m.clock()
		task := fmt.Sprint("t", m.rnd.IntN(5))
		var what string
		switch op := m.rnd.IntN(100); {
		case op < 30:
			what = m.claim(task)
		case op < 50:
			what = m.renew()
		case op < 60:
			what = m.release()
		case op < 70:
			what = m.reap()
		case op < 80:
			what = m.get(task)
		case op < 83:
			what = m.ensure()
		default:
			d := time.Duration(m.rnd.Int64N(int64(h.TTL / 3)))
			m.b.Advance(d)
			if m.exact {
				m.now += d
			}
			what = fmt.Sprint("advance ", d)
		}
		if t.Failed() {
			t.Fatalf("seed %d, step %d (%s at %v) broke an invariant", seed, step, what, m.now)
		}
	}
}

// live: the model is sure the token's lease is live. expired: sure it is
// not. On an exact clock exactly one holds.
func (m *randomModel) live(tok *token) bool {
	return tok != nil && !tok.dead && m.now < tok.expires-m.margin
}

func (m *randomModel) expired(tok *token) bool {
	return tok == nil || tok.dead || m.now >= tok.expiresLate
}

// clock is the model's time: exact, or the wall clock since the start.
func (m *randomModel) clock() time.Duration {
	if m.exact {
		return m.now
	}
	return time.Since(m.start)
}

func (m *randomModel) claim(task string) string {
	old := m.latest[task]
	f, err := m.b.Claim(m.t.Context(), task, "w", m.ttl)
	if errors.Is(err, core.ErrLeaseHeld) {
		if m.expired(old) {
			m.t.Errorf("Claim(%q): %v, but its last lease %+v is gone or expired", task, err, old)
		}
		return "claim held " + task
	}
	if err != nil {
		m.t.Errorf("Claim(%q): %v", task, err)
		return "claim " + task
	}
	if m.live(old) {
		m.t.Errorf("Claim(%q) = fence %d, but lease %+v is live", task, f, old)
	}
	if f <= m.top || m.byFence[f] != nil {
		m.t.Errorf("Claim(%q) = fence %d, want a new token above %d", task, f, m.top)
	}
	if old != nil {
		old.dead, old.gone = true, true // replaced: the old owner is fenced out
	}
	tok := &token{task: task, fence: f, expires: m.now + m.ttl, expiresLate: m.clock() + m.ttl}
	m.tokens = append(m.tokens, tok)
	m.byFence[f], m.latest[task], m.top = tok, tok, f
	return fmt.Sprint("claim ", task, " = ", f)
}

// pick returns a known token, or now and then one that was never issued.
func (m *randomModel) pick() *token {
	if len(m.tokens) == 0 || m.rnd.IntN(10) == 0 {
		return &token{task: fmt.Sprint("t", m.rnd.IntN(5)), fence: 1<<62 + m.rnd.Uint64N(1000), dead: true, gone: true}
	}
	return m.tokens[m.rnd.IntN(len(m.tokens))]
}

func (m *randomModel) renew() string {
	toks := []*token{m.pick(), m.pick(), m.pick()}
	rs := make([]lease.Renewal, len(toks))
	for i, tok := range toks {
		rs[i] = lease.Renewal{TaskID: tok.task, Fence: tok.fence}
	}
	for i, err := range m.b.Renew(m.t.Context(), rs, m.ttl) {
		if m.outcome("Renew", toks[i], err) {
			toks[i].expires, toks[i].expiresLate = m.now+m.ttl, m.clock()+m.ttl
		}
	}
	return fmt.Sprint("renew ", rs)
}

func (m *randomModel) release() string {
	tok := m.pick()
	if m.outcome("Release", tok, m.b.Release(m.t.Context(), tok.task, tok.fence)) {
		tok.dead, tok.gone = true, true
	}
	return fmt.Sprint("release ", tok.task, " ", tok.fence)
}

// outcome checks a renewal's or release's verdict on tok against the
// model and reports whether it succeeded.
func (m *randomModel) outcome(op string, tok *token, err error) bool {
	switch {
	case err == nil && m.expired(tok):
		m.t.Errorf("%s(%q, %d) succeeded, but that lease is gone or expired (%+v)", op, tok.task, tok.fence, tok)
	case err == nil:
		return true
	case !errors.Is(err, core.ErrLeaseLost):
		m.t.Errorf("%s(%q, %d): %v", op, tok.task, tok.fence, err)
	case m.live(tok):
		m.t.Errorf("%s(%q, %d): %v, but that lease is live (%+v)", op, tok.task, tok.fence, err, tok)
	default:
		tok.dead = true // lost for good: expired, released, reaped or replaced
	}
	return false
}

func (m *randomModel) reap() string {
	limit := m.rnd.IntN(4)
	got, err := m.b.Reap(m.t.Context(), limit)
	if err != nil {
		m.t.Errorf("Reap(%d): %v", limit, err)
	}
	if limit > 0 && len(got) > limit {
		m.t.Errorf("Reap(%d) returned %d leases", limit, len(got))
	}
	for _, l := range got {
		tok := m.byFence[l.Fence]
		if tok == nil || tok.gone || tok.task != l.TaskID || m.latest[l.TaskID] != tok || m.live(tok) {
			m.t.Errorf("Reap returned %+v, which is not an expired lease in the store (%+v)", l, tok)
			continue
		}
		tok.dead, tok.gone = true, true
	}
	if limit == 0 { // all of them: nothing expired may be left
		for task, tok := range m.latest {
			if !tok.gone && m.expired(tok) {
				m.t.Errorf("Reap(0) left the expired lease of %q (%+v)", task, tok)
			}
		}
	}
	return fmt.Sprint("reap ", limit, " = ", len(got))
}

func (m *randomModel) get(task string) string {
	l, ok, err := m.b.Get(m.t.Context(), task)
	if err != nil {
		m.t.Errorf("Get(%q): %v", task, err)
	}
	tok := m.latest[task]
	switch {
	case ok && (m.expired(tok) || tok.fence != l.Fence || l.TaskID != task):
		m.t.Errorf("Get(%q) = %+v, want the live lease of its last claim (%+v)", task, l, tok)
	case !ok && m.live(tok):
		m.t.Errorf("Get(%q) found nothing, but lease %+v is live", task, tok)
	}
	return fmt.Sprint("get ", task, " = ", l.Fence, ok)
}

func (m *randomModel) ensure() string {
	min := m.top + uint64(m.rnd.IntN(5))
	if err := m.b.EnsureFenceAbove(m.t.Context(), min); err != nil {
		m.t.Errorf("EnsureFenceAbove(%d): %v", min, err)
	}
	m.top = min
	return fmt.Sprint("ensure ", min)
}
