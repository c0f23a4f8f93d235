package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/terminal"
)

// GET /ws/sessions/{id} (API.md) and its alias GET /api/tasks/{id}/terminal:
// the terminal of an interactive run (issue 34, docs/interactive.md), for
// its owner only. Binary messages are terminal bytes both ways; text
// messages are JSON control messages: from the client {"resize":[cols,rows]},
// from the server {"error": "..."}, {"lagged": bytes} (output dropped for
// this viewer: it did not read fast enough) and, last, {"ended": {"status",
// "exitCode"}}. Closing the socket detaches; the session goes on.
//
// The connection's goroutine reads (input waits for the worker's window,
// so a paste flows at the PTY's pace); a second writes what the session's
// viewer queue holds, a third pings. Nothing here can block the run: the
// viewer's queue is bounded and drops for this viewer alone.

// Terminals is what the terminal WebSocket needs from the dispatcher.
type Terminals interface {
	// Terminal returns the terminal of interactive run id, placed on this
	// master's workers and started; an error when this master does not
	// hold it.
	Terminal(id string) (*terminal.Session, error)
}

const (
	// termReadChunk is how much of a client's input message is read and
	// forwarded at a time: a 10 MB paste is never held whole.
	termReadChunk = terminal.InputChunk
	// termControlLimit bounds a text (control) message.
	termControlLimit = 4 << 10
	// termStatusEvery is how often an attached run's status is read again:
	// a run that ended without its worker's report (lost, reaped) ends its
	// viewers within it.
	termStatusEvery = 5 * time.Second
)

func (s *Server) terminal(r *request) *apiError {
	u, e := s.wsAdmit(r)
	if e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	t, err := s.st.Task(ctx, r.id)
	cancel()
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if e := terminalAllowed(u, t); e != nil {
		return e
	}
	if s.cfg.Terminals == nil {
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "this master serves no terminals"}
	}
	sess, err := s.cfg.Terminals.Terminal(t.ID)
	if err != nil {
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable,
			fmt.Sprintf("session %s is held by another master (or its worker is reconnecting); try again, or attach through the gateway", t.ID)}
	}
	view, err := sess.Attach()
	if err != nil {
		return &apiError{fasthttp.StatusConflict, codeConflict, fmt.Sprintf("session %s has ended; its log has what it showed", t.ID)}
	}
	trace := r.trace
	up := s.wsUpgrader(trace)
	shutdown := r.ctx.Done()
	if err := up.Upgrade(r.ctx, func(conn *websocket.Conn) {
		s.serveTerminal(conn, sess, view, u, t.ID, trace, shutdown)
	}); err != nil {
		view.Detach() // the upgrader answered through Error
	}
	return nil
}

// terminalAllowed: only the owner attaches, to an interactive run that
// runs. Admins are refused too: a terminal types as its owner, in their
// files (docs/decisions.md, issue 34); an admin may cancel the run.
func terminalAllowed(u core.User, t core.Task) *apiError {
	switch {
	case t.UserID != u.ID:
		return &apiError{fasthttp.StatusForbidden, codeForbidden,
			fmt.Sprintf("session %s is %s's: only its owner may attach to it (admins may cancel it)", t.ID, t.User)}
	case t.Kind != core.KindInteractive:
		return &apiError{fasthttp.StatusConflict, codeConflict,
			fmt.Sprintf("run %s is a batch run (kind %q): it has no terminal; read its log instead", t.ID, t.Kind)}
	case t.Status.Terminal():
		return &apiError{fasthttp.StatusConflict, codeConflict,
			fmt.Sprintf("session %s has ended: %s; its log has what it showed", t.ID, t.Status)}
	case t.Status != core.StatusRunning:
		return &apiError{fasthttp.StatusConflict, codeConflict,
			fmt.Sprintf("session %s has not started yet: %s; attach once it is RUNNING", t.ID, t.Status)}
	}
	return nil
}

// termControl is a client's text message.
type termControl struct {
	Resize []int `json:"resize"`
}

func (s *Server) serveTerminal(conn *websocket.Conn, sess *terminal.Session, view *terminal.Viewer,
	u core.User, id, trace string, shutdown <-chan struct{}) {
	log := s.log.With().Str("traceId", trace).Int64("userId", u.ID).Str("task", id).Logger()
	ctx, cancel := context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).Msg("BUG: terminal WebSocket reader panicked")
		}
		cancel()
		view.Detach()
		_ = conn.Close()
		<-writerDone
	}()
	ping := s.wsPing()
	idle := ping * 5 / 2
	_ = conn.SetReadDeadline(time.Now().Add(idle))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(idle)) })
	var wmu sync.Mutex // the reader's error answers and the writer's frames
	go s.termWrite(ctx, conn, &wmu, view, id, ping, writerDone, log)
	go s.wsRevoke(conn, u, min(ping, wsRecheck), ctx.Done(), log)
	go s.termWatch(ctx, conn, sess, id, shutdown)

	buf := make([]byte, termReadChunk)
	for {
		typ, rd, err := conn.NextReader()
		if err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(idle))
		switch typ {
		case websocket.BinaryMessage:
			dropped := false
			for {
				n, err := io.ReadFull(rd, buf)
				if n > 0 && !dropped {
					if werr := sess.Write(ctx, buf[:n]); werr != nil {
						if errors.Is(werr, terminal.ErrEnded) || ctx.Err() != nil {
							return // the writer tells the end
						}
						// Its worker is away (reconnecting): this message is
						// dropped, the viewer told; the session goes on.
						dropped = true
						b, _ := json.Marshal(map[string]string{"error": "input dropped: " + werr.Error() + "; type again once the session answers"})
						if !termSend(conn, &wmu, websocket.TextMessage, b) {
							return
						}
					}
					_ = conn.SetReadDeadline(time.Now().Add(idle)) // a long paste is not silence
				}
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					break
				}
				if err != nil {
					return
				}
			}
		case websocket.TextMessage:
			msg, err := io.ReadAll(io.LimitReader(rd, termControlLimit+1))
			if err != nil {
				return
			}
			if e := termHandle(sess, msg); e != "" {
				b, _ := json.Marshal(map[string]string{"error": e})
				if !termSend(conn, &wmu, websocket.TextMessage, b) {
					return
				}
			}
		}
	}
}

// termHandle acts on a control message; a non-empty answer is its error.
func termHandle(sess *terminal.Session, msg []byte) string {
	if len(msg) > termControlLimit {
		return fmt.Sprintf("a control message is at most %d bytes", termControlLimit)
	}
	var c termControl
	if err := json.Unmarshal(msg, &c); err != nil || c.Resize == nil {
		return `send {"resize":[cols,rows]} as text; terminal input goes in binary messages`
	}
	if len(c.Resize) != 2 {
		return "resize must be [cols, rows]"
	}
	if err := sess.Resize(c.Resize[0], c.Resize[1]); err != nil {
		if errors.Is(err, terminal.ErrBadSize) {
			return fmt.Sprintf("resize %dx%d refused: %v", c.Resize[0], c.Resize[1], err)
		}
		return err.Error()
	}
	return ""
}

// termSend writes one data frame under wmu (the library allows one writer
// at a time); false when the socket failed.
func termSend(conn *websocket.Conn, wmu *sync.Mutex, typ int, b []byte) bool {
	wmu.Lock()
	defer wmu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(wsWriteTimeout))
	return conn.WriteMessage(typ, b) == nil
}

// termWrite writes the viewer's output and, last, the end; the reader's
// error answers go beside it under wmu, pings beside both (WriteControl).
func (s *Server) termWrite(ctx context.Context, conn *websocket.Conn, wmu *sync.Mutex, view *terminal.Viewer, id string,
	ping time.Duration, done chan<- struct{}, log zerolog.Logger) {
	defer close(done)
	defer func() {
		if p := recover(); p != nil {
			log.Error().Str("panic", fmt.Sprint(p)).Bytes("stack", debug.Stack()).Msg("BUG: terminal WebSocket writer panicked")
		}
		_ = conn.Close()
	}()
	go func() {
		t := time.NewTicker(ping)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteTimeout)) != nil {
					_ = conn.Close()
					return
				}
			}
		}
	}()
	write := func(typ int, b []byte) bool { return termSend(conn, wmu, typ, b) }
	for {
		out, lagged, _, err := view.Next(ctx)
		if errors.Is(err, terminal.ErrEnded) {
			b, _ := json.Marshal(map[string]any{"ended": s.termEnd(id)})
			if write(websocket.TextMessage, b) {
				_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "session ended"),
					time.Now().Add(time.Second))
			}
			return
		}
		if err != nil {
			return
		}
		if lagged > 0 {
			b, _ := json.Marshal(map[string]int64{"lagged": lagged})
			if !write(websocket.TextMessage, b) {
				return
			}
		}
		if len(out) > 0 {
			n := 0
			for _, b := range out {
				n += len(b)
			}
			msg := make([]byte, 0, n)
			for _, b := range out {
				msg = append(msg, b...)
			}
			if !write(websocket.BinaryMessage, msg) {
				return
			}
		}
	}
}

// termEnd is the "ended" message: the run's status and exit code as
// stored (the worker's report is recorded before the session ends).
func (s *Server) termEnd(id string) map[string]any {
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, id)
	if err != nil {
		return map[string]any{"status": "unknown"}
	}
	return map[string]any{"status": t.Status, "exitCode": t.ExitCode, "error": t.Error}
}

// termWatch ends the session when its run ended without a report reaching
// this master (a lost worker, a cancel by another master), or when the
// server shuts down (for this viewer only: the session goes on).
func (s *Server) termWatch(ctx context.Context, conn *websocket.Conn, sess *terminal.Session, id string, shutdown <-chan struct{}) {
	t := time.NewTicker(termStatusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-shutdown:
			_ = conn.Close()
			return
		case <-t.C:
		}
		sctx, cancel := storeCtx()
		task, err := s.st.Task(sctx, id)
		cancel()
		if err == nil && task.Status.Terminal() {
			sess.End(string(task.Status))
			return
		}
	}
}
