package httpapi

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/clip"
	"github.com/rlsched/rlsched/store"
)

// Finding runs again (API.md "Runs" and issue 17): the filters of
// GET /api/tasks and its CSV form.

const (
	maxParamFilters = 16
	paramPrefix     = "param."
)

// runFilter reads GET /api/tasks' query: status, user, project, tag, name
// and note (substrings, without case), isBaseline (true or false: the
// record's mark; not "baseline", which /api/compare's normalisation
// names), sweep, rerunOf, param.<key>=<value> (a JSON
// value compared as JSON: param.lr=0.001 matches 1e-3), createdAfter and
// createdBefore (RFC 3339; at or after, and before), limit, cursor and
// format (json or csv). A bad value is a 400 naming the parameter.
func runFilter(q *fasthttp.Args) (f store.Filter, csvOut bool, e *apiError) {
	if v := string(q.Peek("status")); v != "" {
		st := core.Status(strings.ToUpper(v))
		if !st.Valid() {
			return f, false, errBadRequest("status must be one of QUEUED, DISPATCHED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, LOST")
		}
		f.Status = st
	}
	f.User = string(q.Peek("user"))
	if len(f.User) > 64 {
		return f, false, errBadRequest("user must be a username")
	}
	f.Project = string(q.Peek("project"))
	if utf8.RuneCountInString(f.Project) > maxProjectChars {
		return f, false, errBadRequest("project must be at most %d characters", maxProjectChars)
	}
	f.Tag = string(q.Peek("tag"))
	if utf8.RuneCountInString(f.Tag) > maxTagChars || strings.IndexByte(f.Tag, 0) >= 0 {
		return f, false, errBadRequest("tag must be at most %d characters without NUL", maxTagChars)
	}
	f.Name = string(q.Peek("name"))
	if utf8.RuneCountInString(f.Name) > maxNameChars || strings.IndexByte(f.Name, 0) >= 0 {
		return f, false, errBadRequest("name must be at most %d characters without NUL", maxNameChars)
	}
	f.Note = string(q.Peek("note"))
	if utf8.RuneCountInString(f.Note) > maxNameChars || strings.IndexByte(f.Note, 0) >= 0 {
		return f, false, errBadRequest("note must be at most %d characters without NUL", maxNameChars)
	}
	switch v := string(q.Peek("isBaseline")); v {
	case "":
	case "true", "false":
		b := v == "true"
		f.Baseline = &b
	default:
		return f, false, errBadRequest("isBaseline must be true or false")
	}
	for _, p := range []struct {
		name string
		dst  *string
	}{{"sweep", &f.Sweep}, {"rerunOf", &f.RerunOf}} {
		if v := string(q.Peek(p.name)); v != "" {
			if !core.ValidTaskID(v) {
				return f, false, errBadRequest("%s must be an id (1–64 of [A-Za-z0-9_-])", p.name)
			}
			*p.dst = v
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"createdAfter", &f.CreatedAfter}, {"createdBefore", &f.CreatedBefore}} {
		if v := string(q.Peek(p.name)); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil || t.Year() < 1678 || t.Year() > 2261 {
				return f, false, errBadRequest("%s must be an RFC 3339 time such as 2025-03-01T00:00:00Z, in the years 1678–2261", p.name)
			}
			*p.dst = t
		}
	}
	var bad *apiError
	q.VisitAll(func(k, v []byte) {
		key, ok := strings.CutPrefix(string(k), paramPrefix)
		if !ok || bad != nil {
			return
		}
		if len(f.Params) == maxParamFilters {
			bad = errBadRequest("at most %d param.<name> filters", maxParamFilters)
			return
		}
		pf, err := store.ParseParamFilter(key, string(v))
		if err != nil {
			bad = errBadRequest("%s%s: %v", paramPrefix, clip.String(key, 64), err)
			return
		}
		f.Params = append(f.Params, pf)
	})
	if bad != nil {
		return f, false, bad
	}
	if v := string(q.Peek("limit")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, false, errBadRequest("limit must be an integer 1..%d", maxListLimit)
		}
		f.Limit = min(n, maxListLimit)
	}
	f.Cursor = string(q.Peek("cursor"))
	if len(f.Cursor) > maxCursorBytes {
		return f, false, errBadRequest("malformed cursor: pass nextCursor of a previous page")
	}
	csvOut, e = formatCSV(q)
	return f, csvOut, e
}

// formatCSV reads ?format=: json (the default) or csv.
func formatCSV(q *fasthttp.Args) (bool, *apiError) {
	switch v := string(q.Peek("format")); v {
	case "", "json":
		return false, nil
	case "csv":
		return true, nil
	}
	return false, errBadRequest("format must be json or csv")
}

// runColumns are the fixed columns of the runs CSV; one column per param
// name seen in the page follows, sorted.
var runColumns = []string{"id", "name", "user", "project", "status", "attempt", "createdAt", "finishedAt", "finalReward"}

// writeRunsCSV answers a page of runs as CSV. The next page's cursor, when
// there is one, is in the X-Next-Cursor header.
func (s *Server) writeRunsCSV(r *request, ts []core.Task, next string) *apiError {
	params := make([]map[string]json.RawMessage, len(ts))
	keys := map[string]bool{}
	for i, t := range ts {
		_ = json.Unmarshal(t.Params, &params[i]) // a View's params are an object
		for k := range params[i] {
			keys[k] = true
		}
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.Sort(names)
	rows := [][]string{append(slices.Clone(runColumns), names...)}
	for i, t := range ts {
		row := []string{t.ID, t.Name, t.User, t.Project, string(t.Status), strconv.Itoa(t.Attempt),
			csvTime(&t.CreatedAt), csvTime(t.FinishedAt), csvFloat(t.FinalReward)}
		for _, k := range names {
			row = append(row, csvValue(params[i][k]))
		}
		rows = append(rows, row)
	}
	if next != "" {
		r.ctx.Response.Header.Set("X-Next-Cursor", next)
	}
	return s.writeCSV(r, "runs.csv", rows)
}

// writeCSV answers rows (the header first) as a CSV download. Every cell
// is made inert for spreadsheets first (csvInert): run names, params and
// tags are any user's text.
func (s *Server) writeCSV(r *request, filename string, rows [][]string) *apiError {
	for _, row := range rows {
		for i, c := range row {
			row[i] = csvInert(c)
		}
	}
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.WriteAll(rows); err != nil {
		s.log.Error().Err(err).Str("traceId", r.trace).Msg("BUG: cannot write CSV")
		return &apiError{fasthttp.StatusInternalServerError, codeInternal, "internal error; report the trace id"}
	}
	r.ctx.SetStatusCode(fasthttp.StatusOK)
	r.ctx.SetContentType("text/csv; charset=utf-8")
	r.ctx.Response.Header.Set("Content-Disposition", `attachment; filename="`+filename+`"`)
	r.ctx.SetBody(buf.Bytes())
	return nil
}

// csvInert keeps a cell from being read as a formula by a spreadsheet
// (CSV injection): one that starts with =, +, -, @, a tab or a carriage
// return gets a leading apostrophe, unless it is a plain number, so that
// negative rewards and learning rates stay numbers.
func csvInert(c string) string {
	if c == "" || !strings.ContainsRune("=+-@\t\r", rune(c[0])) {
		return c
	}
	if _, err := strconv.ParseFloat(c, 64); err == nil {
		return c
	}
	return "'" + c
}

func csvTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func csvFloat(f *float64) string {
	if f == nil {
		return ""
	}
	return strconv.FormatFloat(*f, 'g', -1, 64)
}

// csvValue is a param value in a cell: a string as it is, anything else
// as its JSON; empty when absent.
func csvValue(v json.RawMessage) string {
	if len(v) == 0 {
		return ""
	}
	var s string
	if v[0] == '"' && json.Unmarshal(v, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}
