package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/artifact/disk"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// artifactEnv is a test server whose outputs are in a disk store.
func artifactEnv(t *testing.T) (*testEnv, *disk.Store) {
	t.Helper()
	blobs, err := disk.Open(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvWith(t, func(c *Config) { c.Blobs = blobs }), blobs
}

// putArtifact stores data as path of attempt of run id.
func putArtifact(t *testing.T, e *testEnv, blobs *disk.Store, id string, attempt int, path string, data []byte, mod time.Time) core.Artifact {
	t.Helper()
	b, err := blobs.Put(context.Background(), bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	a := core.Artifact{TaskID: id, Attempt: attempt, Path: path, Size: b.Size, SHA256: b.SHA256, ModifiedAt: mod}
	if err := e.st.PutArtifact(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	return a
}

// setAttempt moves a run to an attempt, as retries would have.
func setAttempt(t *testing.T, e *testEnv, id string, attempt int) {
	t.Helper()
	tk := e.task(id)
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	tk.Attempt = attempt
	if err := e.st.UpdateTask(context.Background(), &tk, exp); err != nil {
		t.Fatal(err)
	}
}

func TestArtifacts_ListAndDownload(t *testing.T) {
	e, blobs := artifactEnv(t)
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	id := e.submit(tok, `{"command":["x"]}`)
	other := e.submit(tok, `{"command":["y"]}`)
	setAttempt(t, e, id, 2)
	mod := time.Date(2026, 5, 6, 7, 8, 9, 10, time.UTC)
	ckpt1 := putArtifact(t, e, blobs, id, 1, "checkpoint.json", []byte(`{"episode":10}`), mod)
	body := bytes.Repeat([]byte("0123456789"), 1000)
	model := putArtifact(t, e, blobs, id, 1, "ckpt/model.bin", body, mod)
	ckpt2 := putArtifact(t, e, blobs, id, 2, "checkpoint.json", []byte(`{"episode":20}`), mod.Add(time.Second))
	putArtifact(t, e, blobs, other, 1, "secret.txt", []byte("another run's"), mod)

	type item struct {
		Path       string    `json:"path"`
		Size       int64     `json:"size"`
		SHA256     string    `json:"sha256"`
		Attempt    int       `json:"attempt"`
		ModifiedAt time.Time `json:"modifiedAt"`
	}
	list := func(q string) []item {
		t.Helper()
		r := e.req("GET", "/api/tasks/"+id+"/artifacts"+q, bobTok, nil) // any signed-in user sees runs
		if r.status != http.StatusOK {
			t.Fatalf("list%s: %d %s", q, r.status, r.body)
		}
		var b struct{ Items []item }
		if err := json.Unmarshal(r.body, &b); err != nil {
			t.Fatal(err)
		}
		return b.Items
	}
	got := list("")
	if len(got) != 2 || got[0].Path != "checkpoint.json" || got[0].Attempt != 2 || got[0].SHA256 != ckpt2.SHA256 ||
		got[1].Path != "ckpt/model.bin" || got[1].Size != 10000 || !got[1].ModifiedAt.Equal(mod) {
		t.Fatalf("newest of each path: %+v", got)
	}
	if got := list("?attempt=1"); len(got) != 2 || got[0].SHA256 != ckpt1.SHA256 {
		t.Fatalf("attempt 1: %+v", got)
	}
	get := func(path string, hdr ...string) resp {
		t.Helper()
		return e.req("GET", "/api/tasks/"+id+"/artifacts/"+path, bobTok, nil, hdr...)
	}
	r := get("ckpt/model.bin")
	if r.status != 200 || !bytes.Equal(r.body, body) || r.header.Get("ETag") != `"`+model.SHA256+`"` ||
		r.header.Get("Content-Length") != "10000" || r.header.Get("Accept-Ranges") != "bytes" ||
		r.header.Get("Content-Type") != "application/octet-stream" || r.header.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("download: %d %v", r.status, r.header)
	}
	if r := get("checkpoint.json"); string(r.body) != `{"episode":20}` {
		t.Fatalf("newest version: %s", r.body)
	}
	if r := get("checkpoint.json?attempt=1"); string(r.body) != `{"episode":10}` {
		t.Fatalf("attempt 1's version: %s", r.body)
	}
	if r := get("ckpt%2Fmodel.bin"); r.status != 200 || len(r.body) != 10000 {
		t.Fatalf("an escaped slash: %d", r.status)
	}
	// Ranges.
	for _, c := range []struct {
		rng, want, cr string
	}{
		{"bytes=0-9", "0123456789", "bytes 0-9/10000"},
		{"bytes=9995-", "56789", "bytes 9995-9999/10000"},
		{"bytes=-3", "789", "bytes 9997-9999/10000"},
		{"bytes=9998-20000", "89", "bytes 9998-9999/10000"},
	} {
		r := get("ckpt/model.bin", "Range", c.rng)
		if r.status != 206 || string(r.body) != c.want || r.header.Get("Content-Range") != c.cr ||
			r.header.Get("Content-Length") != strconv.Itoa(len(c.want)) {
			t.Fatalf("Range %s: %d %q %v", c.rng, r.status, r.body, r.header)
		}
	}
	if r := get("ckpt/model.bin", "Range", "bytes=10000-"); r.status != 416 || r.header.Get("Content-Range") != "bytes */10000" {
		t.Fatalf("a range past the end: %d %v", r.status, r.header)
	}
	if r := get("ckpt/model.bin", "Range", "bytes=0-1,5-6"); r.status != 200 || len(r.body) != 10000 {
		t.Fatalf("several ranges are served whole: %d", r.status)
	}
	if r := get("ckpt/model.bin", "Range", "bytes=0-9", "If-Range", `"other"`); r.status != 200 {
		t.Fatalf("If-Range of another version: %d", r.status)
	}
	if r := get("ckpt/model.bin", "If-None-Match", `"`+model.SHA256+`"`); r.status != 304 {
		t.Fatalf("If-None-Match: %d", r.status)
	}
	// Bad paths are 400; unknown ones, another run's, unknown attempts 404.
	for _, p := range []string{"..%2F..%2Fetc%2Fpasswd", "a/../b", "%2Fetc%2Fpasswd", "/etc/passwd", "a%00b", strings.Repeat("a", 1025), "a//b"} {
		if r := get(p); r.status != 400 || r.errCode(t) != "bad_request" {
			t.Fatalf("path %.40q: %d %s", p, r.status, r.body)
		}
	}
	for _, p := range []string{"nope", "secret.txt", "checkpoint.json?attempt=3", "ckpt/model.bin?attempt=2", "ckpt"} {
		if r := get(p); r.status != 404 || r.errCode(t) != "not_found" {
			t.Fatalf("path %s: %d %s", p, r.status, r.body)
		}
	}
	if r := e.req("GET", "/api/tasks/"+id+"/artifacts?attempt=3", tok, nil); r.status != 404 {
		t.Fatalf("list of an unknown attempt: %d", r.status)
	}
	if r := e.req("GET", "/api/tasks/"+id+"/artifacts?attempt=x", tok, nil); r.status != 400 {
		t.Fatalf("list of attempt x: %d", r.status)
	}
	if r := e.req("GET", "/api/tasks/r-nope/artifacts/checkpoint.json", tok, nil); r.status != 404 {
		t.Fatalf("unknown run: %d", r.status)
	}
	// A blob gone from the store is 404, not a 500.
	if err := blobs.Delete(context.Background(), model.SHA256); err != nil {
		t.Fatal(err)
	}
	if r := get("ckpt/model.bin"); r.status != 404 {
		t.Fatalf("a missing blob: %d %s", r.status, r.body)
	}
}

func TestSubmit_ResumeFrom(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	src := e.submit(tok, `{"command":["x"]}`)
	id := e.submit(tok, `{"command":["x"],"resumeFrom":"`+src+`"}`)
	if got := e.task(id); got.ResumeFrom != src {
		t.Fatalf("resumeFrom stored as %q", got.ResumeFrom)
	}
	r := e.req("GET", "/api/tasks/"+id, tok, nil)
	if !strings.Contains(string(r.body), `"resumeFrom":"`+src+`"`) || !strings.Contains(string(r.body), `"warnings":[]`) {
		t.Fatalf("task JSON: %s", r.body)
	}
	for body, want := range map[string]string{
		`{"command":["x"],"resumeFrom":"../etc"}`:   "resumeFrom must be a run id",
		`{"command":["x"],"resumeFrom":"r-nope"}`:   "resumeFrom: there is no run r-nope",
		`{"command":["x"],"resumeFrom":7}`:          "",
		`{"command":["x"],"resumeFrom":"a\u0000b"}`: "resumeFrom must be a run id",
	} {
		r := e.req("POST", "/api/train", tok, body)
		if r.status != 400 || r.errCode(t) != "bad_request" || !strings.Contains(string(r.body), want) {
			t.Fatalf("%s: %d %s", body, r.status, r.body)
		}
	}
	// A rerun does not inherit it; one with it in the body resumes.
	r = e.req("POST", "/api/tasks/"+id+"/rerun", tok, nil)
	var sub struct{ ID string }
	mustJSON(t, r.body, &sub)
	if got := e.task(sub.ID); got.ResumeFrom != "" {
		t.Fatalf("a rerun inherited resumeFrom %q", got.ResumeFrom)
	}
	r = e.req("POST", "/api/tasks/"+src+"/rerun", tok, `{"resumeFrom":"`+id+`"}`)
	mustJSON(t, r.body, &sub)
	if r.status != 202 || e.task(sub.ID).ResumeFrom != id {
		t.Fatalf("rerun with resumeFrom: %d %s", r.status, r.body)
	}
	if r := e.req("POST", "/api/tasks/"+src+"/rerun", tok, `{"resumeFrom":"r-nope"}`); r.status != 400 {
		t.Fatalf("rerun with an unknown resumeFrom: %d", r.status)
	}
}

// GET /api/auth/me says what the user's runs keep and their limit
// (ARTIFACT_MAX_MB_PER_USER), every attempt's files counted, others' not.
func TestMe_ArtifactBytes(t *testing.T) {
	blobs, err := disk.Open(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *Config) { c.Blobs, c.MaxUserOutputBytes = blobs, 1<<40 })
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	id := e.submit(tok, `{"command":["x"]}`)
	putArtifact(t, e, blobs, id, 1, "a", []byte("12345"), time.Unix(1, 0))
	setAttempt(t, e, id, 2)
	putArtifact(t, e, blobs, id, 2, "a", []byte("123"), time.Unix(2, 0))
	putArtifact(t, e, blobs, e.submit(bobTok, `{"command":["y"]}`), 1, "b", []byte("1234567"), time.Unix(3, 0))
	for _, c := range []struct {
		tok  string
		want float64
	}{{tok, 8}, {bobTok, 7}} {
		m := e.req("GET", "/api/auth/me", c.tok, nil).json(t)
		if m["artifactBytes"] != c.want || m["artifactLimitBytes"] != float64(1<<40) {
			t.Fatalf("me: %v, want artifactBytes %v of 1 TiB", m, c.want)
		}
	}
}
