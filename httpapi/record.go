package httpapi

import (
	"bytes"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// maxNoteChars bounds a run's note: a paragraph or a few, not a file (a
// MySQL TEXT column holds 65,535 bytes, 4 a character at most).
const maxNoteChars = 10_000

// recordBody is PATCH /api/tasks/{id}'s body (API.md "Editable runs"):
// absent and null fields stay. tags replaces the tags; addTags and
// removeTags change them, after tags, so a client need not read them
// first (the CLI's --tag and --untag).
type recordBody struct {
	Name       *string   `json:"name"`
	Tags       *[]string `json:"tags"`
	AddTags    []string  `json:"addTags"`
	RemoveTags []string  `json:"removeTags"`
	Note       *string   `json:"note"`
	Baseline   *bool     `json:"baseline"`
}

// editTask is PATCH /api/tasks/{id}: the run's owner or an admin changes
// its record (name, tags, note, baseline) at any status.
func (s *Server) editTask(r *request) *apiError {
	body := r.ctx.PostBody()
	if len(bytes.TrimSpace(body)) == 0 {
		return errBadRequest(`send a JSON object with any of name, tags, addTags, removeTags, note, baseline`)
	}
	var b recordBody
	if e := decodeJSON(body, &b); e != nil {
		return e
	}
	if b.Name == nil && b.Tags == nil && b.AddTags == nil && b.RemoveTags == nil && b.Note == nil && b.Baseline == nil {
		return errBadRequest(`nothing to change: send any of name, tags, addTags, removeTags, note, baseline`)
	}
	if b.Name != nil {
		if n := utf8.RuneCountInString(*b.Name); n == 0 || n > maxNameChars || strings.IndexByte(*b.Name, 0) >= 0 {
			return errBadRequest("name must be 1..%d characters without NUL", maxNameChars)
		}
	}
	if b.Note != nil {
		if utf8.RuneCountInString(*b.Note) > maxNoteChars || strings.IndexByte(*b.Note, 0) >= 0 || !utf8.ValidString(*b.Note) {
			return errBadRequest("note must be at most %d characters without NUL", maxNoteChars)
		}
	}
	if b.Tags != nil {
		if e := checkTags("tags", *b.Tags); e != nil {
			return e
		}
	}
	if e := checkTags("addTags", b.AddTags); e != nil {
		return e
	}
	if e := checkTags("removeTags", b.RemoveTags); e != nil {
		return e
	}
	ctx, cancel := storeCtx()
	defer cancel()
	t, err := s.st.Task(ctx, r.id)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	if t.UserID != r.user.ID && r.user.Role != core.RoleAdmin {
		return &apiError{fasthttp.StatusForbidden, codeForbidden, "only the run's owner or an admin may edit it"}
	}
	e := store.RecordEdit{Name: b.Name, Note: b.Note, Baseline: b.Baseline}
	if b.Tags != nil || b.AddTags != nil || b.RemoveTags != nil {
		e.Tags = func(cur []string) ([]string, error) { return editTags(cur, b, t.SweepID) }
	}
	nt, err := s.st.EditRecord(ctx, r.id, e)
	if err != nil {
		return storeError(err, "run "+r.id)
	}
	s.log.Info().Str("traceId", r.trace).Str("taskId", nt.ID).Int64("userId", r.user.ID).Msg("run record edited")
	v := []core.Task{nt.ViewFor(r.user)}
	s.explainQueue(ctx, v)
	return s.writeJSON(r, fasthttp.StatusOK, v[0])
}

// checkTags holds a list of tags of field to a submission's rules.
func checkTags(field string, tags []string) *apiError {
	if len(tags) > maxTags {
		return errBadRequest("%s: at most %d tags", field, maxTags)
	}
	for i, t := range tags {
		if t == "" || utf8.RuneCountInString(t) > maxTagChars || strings.IndexByte(t, 0) >= 0 {
			return errBadRequest("%s[%d] must be 1..%d characters without NUL", field, i, maxTagChars)
		}
	}
	return nil
}

// editTags is a run's tags after b: b.Tags (or cur) less b.RemoveTags,
// with b.AddTags not already there appended, each tag once, in order. A
// sweep member keeps its sweep's tag, which marks it in lists and
// filters; the result holds at most maxTags.
func editTags(cur []string, b recordBody, sweepID string) ([]string, error) {
	next := cur
	if b.Tags != nil {
		next = *b.Tags
	}
	out := make([]string, 0, len(next)+len(b.AddTags))
	for _, t := range slices.Concat(next, b.AddTags) {
		if !slices.Contains(out, t) && !slices.Contains(b.RemoveTags, t) {
			out = append(out, t)
		}
	}
	if sweepID != "" {
		if tag := core.SweepTag(sweepID); slices.Contains(cur, tag) && !slices.Contains(out, tag) {
			return nil, errBadRequest("tags: %s marks the run as a member of its sweep and cannot be removed", tag)
		}
	}
	if len(out) > maxTags {
		return nil, errBadRequest("tags: the run would have %d tags, at most %d", len(out), maxTags)
	}
	return out, nil
}
