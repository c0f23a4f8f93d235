package httpapi

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
)

const (
	defaultLogLimit = 1 << 20
	maxLogLimit     = 8 << 20
)

type logPage struct {
	Status     string      `json:"status"`
	Content    []string    `json:"content"`
	Offset     int64       `json:"offset"`
	NextOffset int64       `json:"nextOffset"`
	EOF        bool        `json:"eof"`
	RunStatus  core.Status `json:"runStatus"`
}

// logs is GET /api/monitor/logs/{taskId}?offset=&limit=&rank=: a byte range of the
// run's log file (a multi-node group's: rank's member's, default 0), as lines (JSON) or raw (Accept: text/plain). The id was
// validated by the router before this runs, so it is safe as a file name.
//
// JSON pages end at a line boundary whenever more bytes may follow (the
// range stops before the file's end, or the run is still live and may finish
// its last line), so no line is ever split across pages; only a single line
// longer than limit comes split. The raw form is the exact byte range.
func (s *Server) logs(r *request) *apiError {
	q := r.ctx.QueryArgs()
	var offset int64
	if v := q.Peek("offset"); len(v) > 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			return errBadRequest("offset must be a byte offset ≥ 0")
		}
		offset = n
	}
	limit := int64(defaultLogLimit)
	if v := q.Peek("limit"); len(v) > 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 1 {
			return errBadRequest("limit must be a byte count 1..%d", maxLogLimit)
		}
		limit = min(n, maxLogLimit)
	}
	rank := 0
	if v := q.Peek("rank"); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err != nil || n < 0 || n >= core.MaxNodes {
			return errBadRequest("rank must be a member's rank, 0 to the run's nodes − 1")
		}
		rank = n
	}
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if rank >= t.Group() {
		return errBadRequest("rank %d: run %s spans %d node(s), ranks 0..%d", rank, r.id, t.Group(), t.Group()-1)
	}
	terminal := t.Status.Terminal()

	buf, size, err := readRange(filepath.Join(s.cfg.LogDir, core.LogFile(r.id, rank)), offset, limit)
	if err != nil {
		s.log.Error().Err(err).Str("traceId", r.trace).Str("taskId", r.id).Msg("cannot read a run log")
		return &apiError{fasthttp.StatusServiceUnavailable, codeUnavailable, "cannot read the run's log; try again later"}
	}
	atEnd := offset+int64(len(buf)) >= size

	if wantsText(r.ctx) {
		next := offset + int64(len(buf))
		r.ctx.Response.Header.Set("X-Next-Offset", strconv.FormatInt(next, 10))
		r.ctx.Response.Header.Set("X-Eof", strconv.FormatBool(terminal && next >= size))
		r.ctx.SetStatusCode(fasthttp.StatusOK)
		r.ctx.SetContentType("text/plain; charset=utf-8")
		r.ctx.SetBody(buf)
		return nil
	}

	if len(buf) > 0 && (!atEnd || !terminal) {
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			buf = buf[:i+1]
		} else if atEnd {
			buf = buf[:0] // a live run's unfinished last line: wait for its end
		}
	}
	next := offset + int64(len(buf))
	return s.writeJSON(r, fasthttp.StatusOK, logPage{
		Status:     "SUCCESS",
		Content:    splitLines(buf),
		Offset:     offset,
		NextOffset: next,
		EOF:        terminal && next >= size,
		RunStatus:  t.Status,
	})
}

// readRange reads up to limit bytes of path from offset, and the file's
// size. A missing file is empty.
func readRange(path string, offset, limit int64) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	if !fi.Mode().IsRegular() || offset >= size {
		return nil, size, nil
	}
	buf := make([]byte, min(limit, size-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return buf[:n], size, nil
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return []string{}
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func wantsText(ctx *fasthttp.RequestCtx) bool {
	accept := string(ctx.Request.Header.Peek(fasthttp.HeaderAccept))
	return strings.Contains(accept, "text/plain") && !strings.Contains(accept, "application/json")
}
