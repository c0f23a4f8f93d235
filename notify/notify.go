// Package notify tells users of their runs' ends: a user's webhook (API.md,
// "Users, privacy, notifications") gets a Slack-compatible POST
// {"text": ..., "run": Task} when one of their runs reaches a status they
// asked for. A Notifier is a core.EventSink placed beside the live hub on
// the run changes this master commits, so each run's end is sent by the
// one master that wrote it.
//
// What it must never do: block the caller of TaskChanged (the store's
// publisher, on the scheduler's and the reports' paths): events go into a
// bounded queue, dropped and counted when it is full, and a few sender
// goroutines do the store reads and the HTTP; or reach an address of the
// master's own network that NOTIFY_ALLOW_HOSTS does not name (Targets).
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/sweep"
)

// Events a user may ask for: the statuses a run ends in (LOST included: it
// is requeued or fails next) and the warning codes of API.md.
var (
	Statuses = []string{string(core.StatusSucceeded), string(core.StatusFailed), string(core.StatusLost),
		string(core.StatusTimeout), string(core.StatusCancelled)}
	Warnings = []string{"idle_gpu", "gpu_foreign", "artifact_limit", core.WarnWorkerSilent}
	// DefaultOn is what a webhook set without "on" hears: every end.
	DefaultOn = []string{string(core.StatusSucceeded), string(core.StatusFailed),
		string(core.StatusTimeout), string(core.StatusCancelled)}
)

// ValidEvent reports whether e is one of Statuses or Warnings.
func ValidEvent(e string) bool { return slices.Contains(Statuses, e) || slices.Contains(Warnings, e) }

// Users reads a run owner's settings.
type Users interface {
	UserByID(ctx context.Context, id int64) (core.User, error)
}

// Sweeps reads a sweep and its members' latest runs (the store).
type Sweeps interface {
	Sweep(ctx context.Context, id string) (store.Sweep, error)
	SweepRuns(ctx context.Context, id string) ([]core.Task, error)
}

// Pipelines reads a run's pipeline and its steps' runs (the store).
type Pipelines interface {
	PipelineOfRun(ctx context.Context, runID string) (string, error)
	Pipeline(ctx context.Context, id string) (store.Pipeline, error)
	Task(ctx context.Context, id string) (core.Task, error)
}

// Config of a Notifier; zero values get the defaults named.
type Config struct {
	Users Users
	// Sweeps, when set, makes a sweep's members one notification: the
	// sweep's, once its last member ended (nil: one per member).
	Sweeps Sweeps
	// Pipelines, when set, does so for a pipeline's steps.
	Pipelines Pipelines
	Targets   *Targets // NOTIFY_ALLOW_HOSTS; nil: any public host
	// BaseURL is the dashboard's address as users open it (PUBLIC_URL),
	// for the run's link; empty: no link.
	BaseURL string
	Queue   int           // events waiting at most; default 1024
	Senders int           // goroutines sending; default 4
	Timeout time.Duration // one POST; default 10 s
	// Retries are the waits before each retry of a POST that failed (no
	// answer, 408, 429 or 5xx); default 2 s, 10 s, 30 s.
	Retries []time.Duration
	// UserTTL is how long an owner's settings read for one notification
	// serve the next ones; default 2 s. Reading them for every run that
	// ended was 13% of the master's CPU in the dispatch benchmark (a read
	// transaction each); a changed webhook takes effect within UserTTL.
	UserTTL time.Duration
	Logger  zerolog.Logger
}

// Notifier sends run notifications. TaskChanged and WorkerChanged are safe
// from any goroutine and never block; Close stops it.
type Notifier struct {
	cfg    Config
	log    zerolog.Logger
	client *http.Client
	queue  chan core.Task
	ctx    context.Context // cancelled by Close: ends the POSTs in flight
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	seen  map[string]struct{} // run/attempt/status already queued (recent ones)
	users map[int64]cachedUser

	sent, failed, dropped atomic.Int64
}

const maxSeen = 1 << 14

// New starts a Notifier's senders.
func New(cfg Config) (*Notifier, error) {
	if cfg.Users == nil {
		return nil, errors.New("BUG: notify.New needs the users")
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 1024
	}
	if cfg.Senders <= 0 {
		cfg.Senders = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Retries == nil {
		cfg.Retries = []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second}
	}
	if cfg.Targets == nil {
		cfg.Targets = &Targets{}
	}
	if cfg.UserTTL <= 0 {
		cfg.UserTTL = 2 * time.Second
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	n := &Notifier{cfg: cfg, log: cfg.Logger.With().Str("component", "notify").Logger(),
		queue: make(chan core.Task, cfg.Queue), seen: map[string]struct{}{}, users: map[int64]cachedUser{}}
	n.ctx, n.stop = context.WithCancel(context.Background())
	n.client = hookClient(cfg.Targets, cfg.Timeout)
	for range cfg.Senders {
		n.wg.Add(1)
		go n.sender()
	}
	return n, nil
}

// hookClient is the HTTP client of webhooks: it dials only what targets
// allow, through no proxy, and follows no redirect.
func hookClient(targets *Targets, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil, // a proxy would dial what Targets never saw
			DialContext:         targets.dialContext,
			TLSHandshakeTimeout: timeout,
			MaxIdleConns:        16,
			IdleConnTimeout:     time.Minute,
		},
		// A redirect is not followed: the hook answered, wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// SendTest posts one test message to webhook now, as a run's notification
// is sent (the same target checks and client, no retries), and says how
// it went: `rlsched notify test` (POST /api/auth/me/notifications/test).
// The body is {"text": ...} alone: no run.
func SendTest(ctx context.Context, targets *Targets, webhook, username string) error {
	if targets == nil {
		targets = &Targets{}
	}
	body, _ := json.Marshal(map[string]string{"text": "rlsched: a test notification for " + slackEscape(username) + "; the ends of your runs come here"})
	_, err := postHook(ctx, hookClient(targets, 10*time.Second), targets, webhook, body, "")
	return err
}

// TaskChanged queues a run that reached a status a user may hear of.
func (n *Notifier) TaskChanged(t core.Task) {
	if !t.Status.Terminal() && t.Status != core.StatusLost {
		return
	}
	key := fmt.Sprintf("%s/%d/%s", t.ID, t.Attempt, t.Status)
	n.mu.Lock()
	if _, ok := n.seen[key]; ok { // a later write of an ended run (its final reward)
		n.mu.Unlock()
		return
	}
	if len(n.seen) >= maxSeen {
		clear(n.seen)
	}
	n.seen[key] = struct{}{}
	n.mu.Unlock()
	select {
	case n.queue <- t:
	default:
		if d := n.dropped.Add(1); d&(d-1) == 0 { // logged at 1, 2, 4, 8, ... drops
			n.log.Warn().Int64("dropped", d).Msg("notification queue full: dropping run notifications")
		}
	}
}

// WorkerChanged is not notified.
func (n *Notifier) WorkerChanged(core.WorkerInfo) {}

// Close stops the senders; queued notifications are dropped, and those
// being sent are cut.
func (n *Notifier) Close() {
	n.stop()
	n.wg.Wait()
	n.client.CloseIdleConnections()
}

// Stats are the notifications sent, given up and dropped since start.
func (n *Notifier) Stats() (sent, failed, dropped int64) {
	return n.sent.Load(), n.failed.Load(), n.dropped.Load()
}

func (n *Notifier) sender() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case t := <-n.queue:
			n.notify(t)
		}
	}
}

// cachedUser is an owner's settings as read at an instant.
type cachedUser struct {
	u   core.User
	err error // core.ErrNotFound is kept too; other errors are not
	at  time.Time
}

// user returns the settings of user id, read at most UserTTL ago.
func (n *Notifier) user(id int64) (core.User, error) {
	now := time.Now()
	n.mu.Lock()
	c, ok := n.users[id]
	n.mu.Unlock()
	if ok && now.Sub(c.at) < n.cfg.UserTTL {
		return c.u, c.err
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	u, err := n.cfg.Users.UserByID(ctx, id)
	cancel()
	if err == nil || errors.Is(err, core.ErrNotFound) {
		n.mu.Lock()
		if len(n.users) >= maxSeen {
			clear(n.users)
		}
		n.users[id] = cachedUser{u: u, err: err, at: now}
		n.mu.Unlock()
	}
	return u, err
}

// notify sends t's notification to its owner's webhook, when they asked for it.
func (n *Notifier) notify(t core.Task) {
	u, err := n.user(t.UserID)
	if err != nil {
		if !errors.Is(err, core.ErrNotFound) {
			n.log.Warn().Err(err).Str("task", t.ID).Msg("cannot read the run owner's notification settings")
		}
		return
	}
	on := u.Notify.On
	if len(on) == 0 {
		on = DefaultOn
	}
	if u.Notify.Webhook == "" || u.Deleted {
		return
	}
	if t.SweepID != "" && n.cfg.Sweeps != nil {
		n.notifySweep(t, u, on)
		return
	}
	if n.cfg.Pipelines != nil && n.notifyPipeline(t, u, on) {
		return
	}
	if !slices.Contains(on, string(t.Status)) {
		return
	}
	body, err := json.Marshal(struct {
		Text string    `json:"text"`
		Run  core.Task `json:"run"`
	}{n.text(t), t.View().MaskedEnv()}) // a webhook may post to a shared channel
	if err != nil {
		n.log.Error().Err(err).Str("task", t.ID).Msg("BUG: cannot encode a notification")
		return
	}
	n.send(u, t, body)
}

// notifySweep sends one message for sweep member t's sweep once no member
// is left to run (a tpe sweep: its budget proposed), if one of its members
// ended in an event of on; the members' own ends send nothing (a sweep of
// 100 was 100 messages). "run" is the member that ended last.
func (n *Notifier) notifySweep(t core.Task, u core.User, on []string) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	sw, err := n.cfg.Sweeps.Sweep(ctx, t.SweepID)
	if err != nil {
		if !errors.Is(err, core.ErrNotFound) {
			n.log.Warn().Err(err).Str("sweep", t.SweepID).Msg("cannot read a sweep to notify its end")
		}
		return
	}
	if !groupEnded(sw.Counts, on) {
		return
	}
	if spec, err := sweep.Parse(sw.Spec); err == nil && spec.Method == sweep.TPE && sw.Members < spec.Budget {
		return // the controller proposes more
	}
	// Once per end: members ending together (sender goroutines) see the
	// same counts; a retry's end has others.
	if !n.first(fmt.Sprintf("sweep/%s/%d/%v", sw.ID, sw.Members, sw.Counts)) {
		return
	}
	var failed *core.Task
	if sw.Counts[core.StatusFailed] > 0 {
		if runs, err := n.cfg.Sweeps.SweepRuns(ctx, sw.ID); err == nil {
			failed = failedOne(runs)
		}
	}
	n.sendGroup(u, t, "sweep", groupEnd{sw.ID, sw.Name, sw.Members, "members", sw.Counts}, failed)
}

// notifyPipeline sends one message for step run t's pipeline once every
// step's latest run ended, if one of them ended in an event of on, as a
// sweep's; false when t is no pipeline's step (it is notified alone).
func (n *Notifier) notifyPipeline(t core.Task, u core.User, on []string) bool {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	id, err := n.cfg.Pipelines.PipelineOfRun(ctx, t.ID)
	if err != nil {
		if !errors.Is(err, core.ErrNotFound) {
			n.log.Warn().Err(err).Str("task", t.ID).Msg("cannot read a run's pipeline to notify its end")
		}
		return !errors.Is(err, core.ErrNotFound)
	}
	p, err := n.cfg.Pipelines.Pipeline(ctx, id)
	if err != nil {
		n.log.Warn().Err(err).Str("pipeline", id).Msg("cannot read a pipeline to notify its end")
		return true
	}
	runs := make([]core.Task, len(p.Steps))
	counts := map[core.Status]int{}
	var latest strings.Builder // the runs that ended it: a retry's end is another
	for i, st := range p.Steps {
		if st.RunID == t.ID {
			runs[i] = t
		} else if runs[i], err = n.cfg.Pipelines.Task(ctx, st.RunID); err != nil {
			n.log.Warn().Err(err).Str("pipeline", id).Msg("cannot read a pipeline's step to notify its end")
			return true
		}
		counts[runs[i].Status]++
		latest.WriteString(st.RunID + ",")
	}
	if !groupEnded(counts, on) || !n.first("pipeline/"+p.ID+"/"+latest.String()) {
		return true
	}
	n.sendGroup(u, t, "pipeline", groupEnd{p.ID, p.Name, len(p.Steps), "steps", counts}, failedOne(runs))
	return true
}

// groupEnded reports whether counts (a sweep's or a pipeline's runs by
// status) have none left to run (LOST is about to be requeued) and one in
// an event of on.
func groupEnded(counts map[core.Status]int, on []string) bool {
	hear := false
	for st, k := range counts {
		if k > 0 && !st.Terminal() {
			return false
		}
		hear = hear || (k > 0 && slices.Contains(on, string(st)))
	}
	return hear
}

// first reports whether key is seen for the first time (recently): of the
// senders that see one group end at once, one sends it.
func (n *Notifier) first(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, dup := n.seen[key]; dup {
		return false
	}
	if len(n.seen) >= maxSeen {
		clear(n.seen)
	}
	n.seen[key] = struct{}{}
	return true
}

// failedOne is a FAILED run of runs, one with a stderr tail if any has one;
// nil when none failed.
func failedOne(runs []core.Task) *core.Task {
	var failed *core.Task
	for i := range runs {
		if runs[i].Status == core.StatusFailed && (failed == nil || runs[i].ErrorTail != "" && failed.ErrorTail == "") {
			failed = &runs[i]
		}
	}
	return failed
}

// groupEnd is a sweep or a pipeline that ended: its runs (members or
// steps: noun) and their counts by status.
type groupEnd struct {
	id, name string
	n        int
	noun     string
	counts   map[core.Status]int
}

// sendGroup sends {"text", kind: {"id", "name", noun: n, "counts"}, "run": t},
// the text counting g's runs by status and showing failed's error and
// stderr tail.
func (n *Notifier) sendGroup(u core.User, t core.Task, kind string, g groupEnd, failed *core.Task) {
	body, err := json.Marshal(map[string]any{"text": n.groupText(kind, g, failed), "run": t.View().MaskedEnv(),
		kind: map[string]any{"id": g.id, "name": g.name, g.noun: g.n, "counts": g.counts}})
	if err != nil {
		n.log.Error().Err(err).Str(kind, g.id).Msg("BUG: cannot encode a notification")
		return
	}
	n.send(u, t, body)
}

func (n *Notifier) groupText(kind string, g groupEnd, failed *core.Task) string {
	name := g.name
	if name == "" {
		name = g.id
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rlsched: %s ", kind)
	if n.cfg.BaseURL != "" {
		fmt.Fprintf(&b, "<%s/%ss/%s|%s>", n.cfg.BaseURL, kind, g.id, slackEscape(name))
	} else {
		fmt.Fprintf(&b, "%s (%s)", slackEscape(name), g.id)
	}
	var parts []string
	for _, st := range core.Statuses() {
		if k := g.counts[st]; k > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", k, st))
		}
	}
	fmt.Fprintf(&b, " ended, %d %s: %s", g.n, g.noun, strings.Join(parts, ", "))
	if failed != nil {
		fmt.Fprintf(&b, "\nfailed, e.g. run %s", failed.ID)
		if failed.Error != "" {
			fmt.Fprintf(&b, ": %s", slackEscape(clipText(failed.Error, 200)))
		}
		b.WriteString(tailBlock(failed.ErrorTail))
	}
	return b.String()
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// tailBlock is the last notifyTailLines of an errorTail as a code block
// ("" for none).
func tailBlock(tail string) string {
	if tail == "" {
		return ""
	}
	lines := strings.Split(tail, "\n")
	lines = lines[max(0, len(lines)-notifyTailLines):]
	t := strings.ReplaceAll(strings.Join(lines, "\n"), "```", "'''") // a fence of its own would end the block
	return "\n```\n" + slackEscape(t) + "\n```"
}

// send POSTs body to u's webhook, retrying as Config.Retries says.
func (n *Notifier) send(u core.User, t core.Task, body []byte) {
	for try := 0; ; try++ {
		retry, err := n.post(u.Notify.Webhook, body, t.TraceID)
		if err == nil {
			n.sent.Add(1)
			n.log.Info().Str("task", t.ID).Str("status", string(t.Status)).Int64("userId", u.ID).Msg("run notification sent")
			return
		}
		if !retry || try >= len(n.cfg.Retries) {
			n.failed.Add(1)
			n.log.Warn().Err(err).Str("task", t.ID).Int64("userId", u.ID).Int("attempts", try+1).Msg("cannot send a run notification; giving up")
			return
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(n.cfg.Retries[try]):
		}
	}
}

// post sends one POST; retry says whether a failure may pass.
func (n *Notifier) post(webhook string, body []byte, trace string) (retry bool, err error) {
	return postHook(n.ctx, n.client, n.cfg.Targets, webhook, body, trace)
}

func postHook(ctx context.Context, client *http.Client, targets *Targets, webhook string, body []byte, trace string) (retry bool, err error) {
	if _, err := targets.CheckURL(webhook); err != nil { // the list may have changed since it was set
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, webhook, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("cannot make the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "rlsched/"+core.Version)
	if trace != "" {
		req.Header.Set("X-Trace-Id", trace)
	}
	resp, err := client.Do(req)
	if err != nil {
		var refused *refusedError // the same address will be refused again
		return !errors.As(err, &refused), fmt.Errorf("cannot reach the webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return false, nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return true, fmt.Errorf("the webhook answered %d", c)
	default:
		return false, fmt.Errorf("the webhook answered %d", c)
	}
}

// text is the message: the run's name (linked when BaseURL is set), its
// status, exit code or error, run time and final reward.
// notifyTailLines is how many lines of a failed run's errorTail its
// notification's text shows.
const notifyTailLines = 5

func (n *Notifier) text(t core.Task) string {
	name := t.Name
	if name == "" {
		name = t.ID
	}
	var b strings.Builder
	b.WriteString("rlsched: run ")
	if n.cfg.BaseURL != "" {
		fmt.Fprintf(&b, "<%s/runs/%s|%s>", n.cfg.BaseURL, t.ID, slackEscape(name))
	} else {
		fmt.Fprintf(&b, "%s (%s)", slackEscape(name), t.ID)
	}
	fmt.Fprintf(&b, " %s", t.Status)
	if t.ExitCode != nil && *t.ExitCode != 0 {
		fmt.Fprintf(&b, " (exit code %d)", *t.ExitCode)
	}
	if t.StartedAt != nil && t.FinishedAt != nil {
		fmt.Fprintf(&b, " after %s", t.FinishedAt.Sub(*t.StartedAt).Round(time.Second))
	}
	if v := t.View().FinalReward; v != nil {
		fmt.Fprintf(&b, "; final reward %g", *v)
	}
	if t.Error != "" && t.Status != core.StatusSucceeded {
		fmt.Fprintf(&b, ": %s", slackEscape(clipText(t.Error, 200)))
	}
	// Its last lines say why; the whole tail is in the body's run.
	b.WriteString(tailBlock(t.ErrorTail))
	return b.String()
}

// slackEscape escapes the three characters Slack's message format gives a
// meaning to.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
