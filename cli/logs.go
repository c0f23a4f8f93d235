package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/internal/backoff"
)

func init() {
	register(&command{
		name:    "logs",
		args:    "ID [-f] [--offset N] [--rank N]",
		summary: "Print a run's output (its log file, whose first line is TRACE_ID:...).",
		details: "With -f, keep printing new output until the run has ended and its log is drained.\n" +
			"Every byte is printed once, in order; --offset N starts at byte N.",
		examples: []string{"rlsched logs -f $id", "rlsched logs $id | grep FINAL_REWARD"},
		run:      runLogs,
	})
}

// logChunk is the most bytes asked for per request (API.md's default limit).
const logChunk = 1 << 20

// logCursor reads a run's log from an offset on and writes each byte once.
type logCursor struct {
	c      *client
	id     string
	offset int64
	out    io.Writer
	limit  int64 // bytes asked for per request; 0: logChunk
	rank   int   // a multi-node group's member; 0: rank 0's, the run's log
}

// fetch reads what the server has from the offset on, writes it and moves
// the offset. n is how far the offset moved; eof is the server's flag (JSON
// mode, or an X-Eof header) and false when the server does not say.
func (l *logCursor) fetch(inv *invocation) (n int64, eof bool, err error) {
	q := url.Values{}
	q.Set("offset", strconv.FormatInt(l.offset, 10))
	limit := int64(logChunk)
	if l.limit > 0 {
		limit = min(l.limit, limit)
	}
	q.Set("limit", strconv.FormatInt(limit, 10))
	if l.rank > 0 {
		q.Set("rank", strconv.Itoa(l.rank))
	}
	resp, err := l.c.do(inv.ctx, http.MethodGet, "/api/monitor/logs/"+url.PathEscape(l.id), q, nil, "text/plain")
	if err != nil {
		return 0, false, err
	}
	var data []byte
	next := int64(-1)
	if h := resp.header.Get("X-Next-Offset"); h != "" {
		next, err = strconv.ParseInt(strings.TrimSpace(h), 10, 64)
		if err != nil || next < l.offset {
			return 0, false, fmt.Errorf("the server sent a bad X-Next-Offset %q for offset %d", h, l.offset)
		}
		data = resp.body
		eof, _ = strconv.ParseBool(resp.header.Get("X-Eof"))
	} else if isJSONResponse(resp) {
		var j struct {
			Content    []string `json:"content"`
			NextOffset *int64   `json:"nextOffset"`
			EOF        bool     `json:"eof"`
		}
		if err := json.Unmarshal(resp.body, &j); err != nil || j.NextOffset == nil {
			return 0, false, fmt.Errorf("cannot understand the server's log answer: %s", fitWidth(string(resp.body), 200))
		}
		next, eof = *j.NextOffset, j.EOF
		if next < l.offset {
			return 0, false, fmt.Errorf("the server sent nextOffset %d before offset %d", next, l.offset)
		}
		data = joinLines(j.Content, next-l.offset)
	} else {
		// Raw bytes without an offset header: they start at our offset.
		data = resp.body
		next = l.offset + int64(len(data))
	}
	if len(data) > 0 {
		if _, err := l.out.Write(data); err != nil {
			return 0, false, fmt.Errorf("cannot write the output: %w", err)
		}
	}
	n = next - l.offset
	l.offset = next
	return n, eof, nil
}

func isJSONResponse(resp *response) bool {
	ct := resp.header.Get("Content-Type")
	if strings.Contains(ct, "json") {
		return true
	}
	return ct == "" && strings.HasPrefix(strings.TrimSpace(string(resp.body)), "{")
}

// joinLines rebuilds the bytes of a JSON log answer from its lines: size is
// the byte length of the range, which tells whether the range ended with a
// newline (or whether the lines kept theirs).
func joinLines(lines []string, size int64) []byte {
	if len(lines) == 0 {
		return nil
	}
	joined := strings.Join(lines, "\n")
	switch size {
	case int64(len(joined)) + 1:
		return []byte(joined + "\n")
	case int64(len(joined)):
		return []byte(joined)
	}
	if concat := strings.Join(lines, ""); int64(len(concat)) == size {
		return []byte(concat)
	}
	return []byte(joined + "\n") // the server split lines some other way; keep them apart
}

func runLogs(inv *invocation, args []string) int {
	fs := inv.newFlags()
	follow := fs.Bool("f", false, "follow: keep printing until the run has ended")
	fs.alias("follow", "f")
	offset := fs.Int64("offset", 0, "start at byte `N` of the log")
	rank := fs.Int("rank", 0, "a multi-node group's member `N`: its log (default 0, the run's log)")
	raw := fs.Bool("raw", false, "print the log's bytes as they are, terminal escapes included (only for a run you trust: they reach your terminal)")
	_, id, code, ok := inv.startID(args, 1, inv.runID)
	if !ok {
		return code
	}
	if *offset < 0 {
		return inv.usageError("--offset must not be negative")
	}
	if *rank < 0 {
		return inv.usageError("--rank must not be negative")
	}
	c, code, ok := inv.newClient()
	if !ok {
		return code
	}
	if *raw {
		inv.env.Stdout = inv.rawStdout // only the log goes to stdout
	}
	if *follow {
		var err error
		if *rank > 0 {
			// The live stream (logs_ws.go) carries rank 0's log only:
			// another member's is polled.
			err = inv.pollLogs(c, id, *offset, *rank)
		} else {
			err = inv.followLogs(c, id, *offset)
		}
		if err != nil && !interrupted(err) { // Ctrl-C is how one stops following
			return inv.fail(err)
		}
		return ExitOK
	}
	lc := &logCursor{c: c, id: id, offset: *offset, out: inv.env.Stdout, rank: *rank}
	for {
		n, eof, err := lc.fetch(inv)
		if err != nil {
			return inv.fail(err)
		}
		if n == 0 || eof {
			return ExitOK
		}
	}
}

// pollLogs writes run id's log from offset on until the run is terminal and
// its log drained, polling REST: the status is read whenever the log has
// nothing new, and once it is terminal the log is read until it answers eof,
// or nothing new twice in a row (a grace poll for bytes still on their way
// to the master); rank picks a multi-node group's member. followLogs uses
// it where the WebSocket is not available, logs -f --rank N always.
func (inv *invocation) pollLogs(c *client, id string, offset int64, rank int) error {
	lc := &logCursor{c: c, id: id, offset: offset, out: inv.env.Stdout, rank: rank}
	out := outage{inv: inv}
	terminal := false // the run was seen terminal before the latest fetch
	empties := 0      // fetches with nothing new since then
	for {
		n, eof, err := lc.fetch(inv)
		if err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				// A run that has not started may have no log yet.
				if _, _, terr := c.getTask(inv.ctx, id); terr != nil {
					return terr
				}
				n, eof, err = 0, false, nil
			}
		}
		if err != nil {
			if !out.failed(err) {
				return err
			}
			if !backoff.Sleep(inv.ctx, inv.env.logsEvery) {
				return interruptedErr(c)
			}
			continue
		}
		out.ok()
		if terminal {
			if n == 0 {
				empties++
			} else {
				empties = 0
			}
			if eof || empties >= 2 {
				return nil
			}
			if n > 0 {
				continue
			}
		} else {
			if n >= logChunk {
				continue // more is waiting
			}
			if n == 0 || eof {
				t, _, err := c.getTask(inv.ctx, id)
				switch {
				case err == nil:
					if t.Status.Terminal() {
						terminal = true
						continue // drain what was written before it ended
					}
				case !out.failed(err):
					return err
				}
			}
		}
		if !backoff.Sleep(inv.ctx, inv.env.logsEvery) {
			return interruptedErr(c)
		}
	}
}
