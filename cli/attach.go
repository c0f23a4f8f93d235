package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/fasthttp/websocket"
	"golang.org/x/term"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/backoff"
)

// `rlsched attach ID`: the terminal of an interactive run over the
// server's WebSocket /ws/sessions/{id} (API.md "Interactive sessions"):
// stdin goes to it as binary messages (in raw mode on a terminal, so Ctrl-C
// is a byte the remote terminal turns into SIGINT), its output to stdout,
// the window size follows SIGWINCH. Ctrl-] then d detaches; a dropped
// connection is reattached, the server's ring bringing the screen back.

func init() {
	register(&command{
		name:     "attach",
		args:     "ID",
		summary:  "Attach your terminal to a running interactive session.",
		details:  "The session's recent screen comes first, then what it shows from then on.\n\n" + detachHelp,
		examples: []string{"rlsched attach r1a2b3c4", "echo 'nvidia-smi; exit' | rlsched attach r1a2b3c4"},
		run: func(inv *invocation, args []string) int {
			inv.newFlags()
			p, code, ok := inv.start(args, 1, 1)
			if !ok {
				return code
			}
			if !core.ValidTaskID(p.pos[0]) {
				return inv.usageError("invalid session id %q", p.pos[0])
			}
			c, code, ok := inv.newClient()
			if !ok {
				return code
			}
			return inv.attach(c, p.pos[0])
		},
	})
}

const (
	// detachKey, then 'd', detaches (telnet's escape character).
	detachKey = 0x1d // Ctrl-]
	// stdinChunk is one read of stdin, one binary message.
	stdinChunk = 32 << 10
)

// errDetached: the user detached.
var errDetached = errors.New("detached")

// attachSession is one `attach`: the connection of the moment and what
// outlives a reconnect.
type attachSession struct {
	inv *invocation
	c   *client
	id  string

	wmu sync.Mutex // one writer at a time
	raw bool       // stdin is a terminal in raw mode
	// ended is the server's "ended" message, once it came: written by the
	// connection's reader, read after serve waited for it.
	ended *termEnded
}

type termEnded struct {
	Status   core.Status `json:"status"`
	ExitCode *int        `json:"exitCode"`
	Error    string      `json:"error"`
}

func (inv *invocation) attach(c *client, id string) int {
	a := &attachSession{inv: inv, c: c, id: id}
	stdin, _ := inv.env.Stdin.(*os.File)
	if stdin != nil && term.IsTerminal(int(stdin.Fd())) {
		old, err := term.MakeRaw(int(stdin.Fd()))
		if err != nil {
			return inv.fail(fmt.Errorf("cannot put the terminal in raw mode: %w", err))
		}
		a.raw = true
		defer term.Restore(int(stdin.Fd()), old)
		fmt.Fprintf(inv.rawStderr, "[rlsched] attached to %s; Ctrl-] then d detaches\r\n", id)
	}
	input := make(chan []byte, 4)
	detach := make(chan struct{})
	go a.readStdin(input, detach)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	out := outage{inv: inv}
	for {
		conn, err := a.dial()
		if err != nil {
			// A refusal ends it (403, 409: the session ended meanwhile);
			// 503 (its worker reconnecting) and network errors are retried
			// for a while (transient).
			if !out.failed(err) {
				return a.finish(err)
			}
			if !backoff.Sleep(inv.ctx, time.Second) {
				return a.finish(interruptedErr(c))
			}
			continue
		}
		out.ok()
		err = a.serve(conn, input, detach, winch)
		if a.ended != nil || errors.Is(err, errDetached) || inv.ctx.Err() != nil {
			return a.finish(err)
		}
		a.note("connection lost (%v); reattaching", err)
	}
}

// note prints a line of the CLI's own between the session's output.
func (a *attachSession) note(format string, args ...any) {
	nl := "\n"
	if a.raw {
		nl = "\r\n"
	}
	fmt.Fprintf(a.inv.env.Stderr, nl+"[rlsched] "+format+nl, args...)
}

// finish is the command's exit: the session's outcome, a detach, or err.
func (a *attachSession) finish(err error) int {
	switch {
	case a.ended != nil:
		e := a.ended
		a.note("session %s ended %s, exit code %s%s", a.id, e.Status, formatInt(e.ExitCode), map[bool]string{true: ": " + e.Error, false: ""}[e.Error != ""])
		if e.Status == core.StatusSucceeded {
			return ExitOK
		}
		return ExitError
	case errors.Is(err, errDetached):
		a.note("detached; session %s goes on: `rlsched attach %s` comes back to it", a.id, a.id)
		return ExitOK
	}
	if a.raw {
		fmt.Fprint(a.inv.rawStderr, "\r\n")
	}
	return a.inv.fail(err)
}

// dial opens the session's WebSocket; a refusal is the server's apiError.
func (a *attachSession) dial() (*websocket.Conn, error) {
	return a.c.dialWS(a.inv.ctx, "/ws/sessions/"+url.PathEscape(a.id), nil)
}

// serve runs one connection until it fails, the session ends or the user
// detaches.
// It closes conn and waits for its reader before returning, so a.ended is
// settled.
func (a *attachSession) serve(conn *websocket.Conn, input <-chan []byte, detach <-chan struct{}, winch <-chan os.Signal) error {
	readErr := make(chan error, 1)
	go func() { readErr <- a.readConn(conn) }()
	read := false
	defer func() {
		conn.Close()
		if !read {
			<-readErr
		}
	}()
	a.resize(conn)
	for {
		select {
		case err := <-readErr:
			read = true
			return err
		case <-detach:
			// What was typed before the sequence goes first (readStdin
			// queued it before closing detach).
			for {
				select {
				case b, open := <-input:
					if open {
						_ = a.write(conn, websocket.BinaryMessage, b)
						continue
					}
				default:
				}
				return errDetached
			}
		case <-winch:
			a.resize(conn)
		case b, open := <-input:
			if !open {
				input = nil // stdin ended: keep showing the session until it ends
				continue
			}
			if err := a.write(conn, websocket.BinaryMessage, b); err != nil {
				return err
			}
		case <-a.inv.ctx.Done():
			return a.inv.ctx.Err()
		}
	}
}

func (a *attachSession) write(conn *websocket.Conn, typ int, b []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return conn.WriteMessage(typ, b)
}

// resize sends the terminal's size, when stdout is one.
func (a *attachSession) resize(conn *websocket.Conn) {
	f, ok := a.inv.rawStdout.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return
	}
	cols, rows, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 || rows <= 0 {
		return
	}
	b, _ := json.Marshal(map[string][]int{"resize": {cols, rows}})
	_ = a.write(conn, websocket.TextMessage, b)
}

// readConn copies the session's output to stdout and handles its control
// messages, until the connection fails or the session ends.
func (a *attachSession) readConn(conn *websocket.Conn) error {
	for {
		typ, b, err := conn.ReadMessage()
		if err != nil {
			if a.ended != nil {
				return nil
			}
			return err
		}
		if typ == websocket.BinaryMessage {
			// The session's bytes as they are: it is a terminal.
			if _, err := a.inv.rawStdout.Write(b); err != nil {
				return err
			}
			continue
		}
		var m struct {
			Ended  *termEnded `json:"ended"`
			Error  string     `json:"error"`
			Lagged int64      `json:"lagged"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch {
		case m.Ended != nil:
			a.ended = m.Ended
			return nil
		case m.Error != "":
			a.note("%s", m.Error)
		case m.Lagged > 0:
			a.note("%d bytes of output were dropped: this terminal did not keep up (the run's log has them)", m.Lagged)
		}
	}
}

// readStdin reads stdin into input, watching for the detach sequence; it
// closes input at EOF.
func (a *attachSession) readStdin(input chan<- []byte, detach chan<- struct{}) {
	defer close(input)
	buf := make([]byte, stdinChunk)
	escaped := false
	for {
		n, err := a.inv.env.Stdin.Read(buf)
		if n > 0 {
			out, esc, detached := detachScan(buf[:n], escaped)
			escaped = esc
			if len(out) > 0 {
				select {
				case input <- out:
				case <-a.inv.ctx.Done():
					return
				}
			}
			if detached {
				close(detach)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// detachScan removes the escape sequences from b: Ctrl-] then d detaches
// (detached; out is what came before), Ctrl-] Ctrl-] is one Ctrl-], Ctrl-]
// then anything else sends both. escaped carries a Ctrl-] that ended the
// previous read.
func detachScan(b []byte, escaped bool) (out []byte, esc, detached bool) {
	if !escaped && bytes.IndexByte(b, detachKey) < 0 {
		return append([]byte(nil), b...), false, false
	}
	out = make([]byte, 0, len(b)+1)
	for _, c := range b {
		switch {
		case escaped && (c == 'd' || c == 'D'):
			return out, false, true
		case escaped && c == detachKey:
			out = append(out, detachKey)
			escaped = false
		case escaped:
			out = append(out, detachKey, c)
			escaped = false
		case c == detachKey:
			escaped = true
		default:
			out = append(out, c)
		}
	}
	return out, escaped, false
}
