package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/backoff"
)

// maxOutage is how long a wait keeps retrying a server that does not answer
// (a master restarting, a gateway failing over) before giving up.
const maxOutage = 2 * time.Minute

// outage tracks consecutive transient failures of a long wait.
type outage struct {
	inv   *invocation
	since time.Time
}

// failed reports whether to keep going after err; it warns once per outage.
func (o *outage) failed(err error) (retry bool) {
	if !transient(err) {
		return false
	}
	now := o.inv.env.now()
	if o.since.IsZero() {
		o.since = now
		o.inv.errorf("warning: %v; retrying for up to %s", err, maxOutage)
		return true
	}
	return now.Sub(o.since) < maxOutage
}

func (o *outage) ok() { o.since = time.Time{} }

func interruptedErr(c *client) error {
	return &netError{Server: c.base, Err: context.Canceled, Interrupted: true}
}

// getTask is GET /api/tasks/{id}.
func (c *client) getTask(ctx context.Context, id string) (core.Task, []byte, error) {
	var t core.Task
	raw, err := c.getJSON(ctx, taskPath(id, ""), nil, &t)
	return t, raw, err
}

// waitRun waits for run id to end (streaming its output with w.follow),
// prints the outcome on stderr (and the run's JSON with w.json) and returns 0
// only when it SUCCEEDED.
func (inv *invocation) waitRun(c *client, id string, w waitFlags) int {
	start := inv.env.now()
	var (
		t   core.Task
		raw []byte
		err error
	)
	if w.follow {
		if err = inv.followLogs(c, id, 0); err == nil {
			t, raw, err = inv.pollTask(c, id, nil)
		}
	} else {
		t, raw, err = inv.pollTask(c, id, func(t core.Task) bool { return t.Status.Terminal() })
	}
	if err != nil {
		code := inv.fail(err)
		if interrupted(err) {
			fmt.Fprintf(inv.env.Stderr, "  stopped waiting; run %s goes on: `rlsched logs -f %s` follows it, `rlsched cancel %s` stops it\n", id, id, id)
		}
		return code
	}
	inv.summary(t, inv.env.now().Sub(start))
	if w.json {
		if code := inv.printJSON(raw); code != ExitOK {
			return code
		}
	}
	if t.Status == core.StatusSucceeded {
		return ExitOK
	}
	return ExitError
}

// pollTask GETs the run every waitEvery until done(task) (nil: once),
// showing its progress line on stderr (poll).
func (inv *invocation) pollTask(c *client, id string, done func(core.Task) bool) (core.Task, []byte, error) {
	var (
		t   core.Task
		raw []byte
	)
	start := inv.env.now()
	err := inv.poll(c, done != nil, func() (string, bool, error) {
		var err error
		if t, raw, err = c.getTask(inv.ctx, id); err != nil {
			return "", false, err
		}
		if done == nil {
			return "", true, nil
		}
		return progressLine(t, inv.env.now().Sub(start), inv.env.isTerminal(inv.rawStderr)), done(t), nil
	})
	if err != nil {
		raw = nil
	}
	return t, raw, err
}

// poll calls fetch every waitEvery until it reports done, retrying through
// an outage of the server. With progress, the line fetch returns is shown
// on stderr: redrawn in place on a terminal (so fetch may put a clock in
// it), else printed when it changes. The last line is not shown: the
// caller reports the outcome.
func (inv *invocation) poll(c *client, progress bool, fetch func() (line string, done bool, err error)) error {
	tty := progress && inv.env.isTerminal(inv.rawStderr)
	out := outage{inv: inv}
	last := ""
	for {
		line, finished, err := fetch()
		if err != nil {
			if tty && last != "" {
				fmt.Fprint(inv.rawStderr, "\r\033[K")
				last = ""
			}
			if !out.failed(err) {
				return err
			}
		} else {
			out.ok()
			switch {
			case !progress:
			case tty:
				// The CLI's own escapes raw, the line (names from the
				// server) through the safe writer.
				fmt.Fprint(inv.rawStderr, "\r\033[K")
				if !finished {
					fmt.Fprint(inv.env.Stderr, line)
					last = line
				}
			case line != last && !finished:
				fmt.Fprintln(inv.env.Stderr, line)
				last = line
			}
			if finished {
				return nil
			}
		}
		if !backoff.Sleep(inv.ctx, inv.env.waitEvery) {
			if tty && last != "" {
				fmt.Fprintln(inv.env.Stderr)
			}
			return interruptedErr(c)
		}
	}
}

// progressLine is "ID STATUS on WORKER (GPUs 0,1, attempt 2) 1:23".
func progressLine(t core.Task, elapsed time.Duration, withClock bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", t.ID, t.Status)
	if t.Worker != "" && !t.Status.Terminal() && t.Status != core.StatusQueued {
		fmt.Fprintf(&b, " on %s", t.Worker)
	}
	var extra []string
	if len(t.GPUIndices) > 0 {
		extra = append(extra, "GPUs "+joinInts(t.GPUIndices))
	}
	if t.Attempt > 1 {
		extra = append(extra, fmt.Sprintf("attempt %d", t.Attempt))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(extra, ", "))
	}
	if withClock {
		fmt.Fprintf(&b, " %s", clock(elapsed))
	}
	return b.String()
}

// summary prints the outcome of a waited-for run on stderr.
func (inv *invocation) summary(t core.Task, elapsed time.Duration) {
	fmt.Fprintf(inv.env.Stderr, "%s %s  exit code %s  finalReward %s  (%s)\n",
		t.ID, t.Status, formatInt(t.ExitCode), formatFloat(t.FinalReward, false), clock(elapsed))
	if t.Error != "" {
		fmt.Fprintf(inv.env.Stderr, "  error: %s\n", t.Error)
	}
	switch {
	case t.Status == core.StatusSucceeded:
	case t.StartedAt == nil: // no program ran, so its log has no output to point at
		fmt.Fprintf(inv.env.Stderr, "  it never started; `rlsched show %s` says why\n", t.ID)
	default:
		fmt.Fprintf(inv.env.Stderr, "  see its output with `rlsched logs %s`\n", t.ID)
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
