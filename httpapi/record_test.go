package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// PATCH /api/tasks/{id}: the owner and an admin edit name, tags, note and
// baseline at any status; anyone else is refused; each field is checked.
func TestEditTask(t *testing.T) {
	e := newEnv(t)
	admin, _ := e.user("root") // the first user is an admin
	alice, _ := e.user("alice")
	bob, _ := e.user("bobby")
	id := e.submit(alice, map[string]any{"command": []string{"true"}, "tags": []string{"a", "b"}})
	path := "/api/tasks/" + id

	edit := func(token string, body any, want int) core.Task {
		t.Helper()
		r := e.req("PATCH", path, token, body)
		if r.status != want {
			t.Fatalf("PATCH %v: %d %s, want %d", body, r.status, r.body, want)
		}
		var got core.Task
		if want == http.StatusOK {
			mustJSON(t, r.body, &got)
		}
		return got
	}
	got := edit(alice, map[string]any{"name": "ppo seed 3", "note": "lr too high", "baseline": true,
		"addTags": []string{"paper", "a"}, "removeTags": []string{"b"}}, http.StatusOK)
	if got.Name != "ppo seed 3" || got.Note != "lr too high" || !got.Baseline || !slices.Equal(got.Tags, []string{"a", "paper"}) {
		t.Fatalf("after the owner's edit: %+v", got)
	}
	if st := e.task(id); st.Name != got.Name || st.Note != got.Note || !st.Baseline || !slices.Equal(st.Tags, got.Tags) {
		t.Fatalf("the store has %+v", st)
	}
	// An ended run is still editable; absent fields stay; tags replaces.
	e.finish(id, core.StatusSucceeded)
	got = edit(admin, map[string]any{"tags": []string{"x"}, "baseline": false}, http.StatusOK)
	if got.Name != "ppo seed 3" || got.Note != "lr too high" || got.Baseline || !slices.Equal(got.Tags, []string{"x"}) {
		t.Fatalf("after the admin's edit: %+v", got)
	}
	// Searchable by the new tag, a part of the note, the baseline mark.
	other := e.submit(alice, map[string]any{"command": []string{"true"}})
	find := func(query string, want ...string) {
		t.Helper()
		r := e.req("GET", "/api/tasks?"+query, alice, nil)
		var page struct {
			Items []core.Task `json:"items"`
		}
		mustJSON(t, r.body, &page)
		var got []string
		for _, it := range page.Items {
			got = append(got, it.ID)
		}
		if r.status != 200 || !slices.Equal(got, want) {
			t.Fatalf("GET /api/tasks?%s after the edit: %d %v, want %v", query, r.status, got, want)
		}
	}
	find("tag=x", id)
	find("note=LR%20too", id)
	find("isBaseline=false", other, id) // the admin's edit cleared it
	edit(alice, map[string]any{"baseline": true}, http.StatusOK)
	find("isBaseline=true", id)
	if r := e.req("GET", "/api/tasks?isBaseline=yes", alice, nil); r.status != 400 || !strings.Contains(string(r.body), "isBaseline must be true or false") {
		t.Fatalf("isBaseline=yes: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/api/tasks?note="+strings.Repeat("n", maxNameChars+1), alice, nil); r.status != 400 {
		t.Fatalf("an over-long note filter: %d %s", r.status, r.body)
	}

	r := e.req("PATCH", path, bob, map[string]any{"name": "mine"})
	if r.status != http.StatusForbidden || r.errCode(t) != "forbidden" {
		t.Fatalf("another user's edit: %d %s", r.status, r.body)
	}
	if e.task(id).Name != "ppo seed 3" {
		t.Fatal("a refused edit changed the name")
	}
	if r := e.req("PATCH", "/api/tasks/r-unknown", alice, map[string]any{"name": "x"}); r.status != 404 || r.errCode(t) != "not_found" {
		t.Fatalf("edit of an unknown run: %d %s", r.status, r.body)
	}
	if r := e.req("PATCH", path, "", map[string]any{"name": "x"}); r.status != 401 {
		t.Fatalf("edit without a token: %d %s", r.status, r.body)
	}

	bad := func(body any, inMessage string) {
		t.Helper()
		r := e.req("PATCH", path, alice, body)
		if r.status != http.StatusBadRequest || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), inMessage) {
			t.Fatalf("PATCH %v: %d %s, want 400 naming %q", body, r.status, r.body, inMessage)
		}
	}
	bad("", "send a JSON object")
	bad("[1]", "JSON object")
	bad("{", "malformed JSON")
	bad(map[string]any{}, "nothing to change")
	bad(map[string]any{"name": ""}, "name must be")
	bad(map[string]any{"name": strings.Repeat("n", maxNameChars+1)}, "name must be")
	bad(map[string]any{"name": 3}, `name\" must be a string`)
	bad(map[string]any{"note": strings.Repeat("é", maxNoteChars+1)}, "note must be")
	bad(map[string]any{"note": "a\x00b"}, "note must be")
	bad(map[string]any{"baseline": "yes"}, `baseline\" must be`)
	bad(map[string]any{"tags": []string{""}}, "tags[0]")
	bad(map[string]any{"addTags": []string{"ok", strings.Repeat("t", maxTagChars+1)}}, "addTags[1]")
	bad(map[string]any{"removeTags": "x"}, `removeTags\" must be`)
	many := make([]string, maxTags)
	for i := range many {
		many[i] = "t" + sprint(i)
	}
	bad(map[string]any{"addTags": many}, "would have 33 tags")
	if st := e.task(id); !slices.Equal(st.Tags, []string{"x"}) || st.Note != "lr too high" || !st.Baseline {
		t.Fatalf("refused edits changed the run: %+v", st)
	}
}

// A sweep member keeps its sweep's tag.
func TestEditTagsKeepsSweepTag(t *testing.T) {
	tag := core.SweepTag("sw1")
	f := func(cur []string, b recordBody, want []string, wantErr string) {
		t.Helper()
		got, err := editTags(cur, b, "sw1")
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("editTags(%v, %+v): %v, %v; want an error naming %q", cur, b, got, err, wantErr)
			}
			return
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("editTags(%v, %+v): %v, %v; want %v", cur, b, got, err, want)
		}
	}
	f([]string{tag}, recordBody{AddTags: []string{"x", "x"}}, []string{tag, "x"}, "")
	f([]string{tag, "x"}, recordBody{Tags: &[]string{tag}}, []string{tag}, "")
	f([]string{tag}, recordBody{RemoveTags: []string{tag}}, nil, "cannot be removed")
	f([]string{tag}, recordBody{Tags: &[]string{"y"}}, nil, "cannot be removed")
}
