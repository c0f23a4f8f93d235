package httpapi

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCodeDiff: a submission's diff is stored, the Task says hasDiff (and
// never carries the diff), code.diff serves it to the owner and admins
// only, a rerun shares it (unless another user reruns), and the remote
// loses its credentials.
func TestCodeDiff(t *testing.T) {
	e := newEnv(t)
	root, _ := e.user("root") // the first user: an admin
	alice, _ := e.user("alice")
	bob, _ := e.user("bob")
	diff := "diff --git a/train.py b/train.py\n--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-lr = 1e-3\n+lr = 3e-4  # <script>alert(1)</script> ünï\n"
	body, _ := json.Marshal(map[string]any{"command": []string{"python3", "train.py"}, "code": map[string]any{
		"gitCommit": "c0ffee", "gitDirty": true, "gitRemote": "https://alice:ghp_secret@github.com/lab/rl.git",
		"diff": diff, "hasDiff": false, "diffId": "nope"}})
	id := e.submit(alice, body)

	r := e.req("GET", "/api/tasks/"+id, bob, nil)
	if r.status != http.StatusOK {
		t.Fatalf("task: %d %s", r.status, r.body)
	}
	var view struct {
		Code map[string]any `json:"code"`
	}
	mustJSON(t, r.body, &view)
	want := map[string]any{"gitCommit": "c0ffee", "gitDirty": true, "gitRemote": "https://github.com/lab/rl.git", "hasDiff": true}
	if sprint(view.Code) != sprint(want) {
		t.Fatalf("Task code %v, want %v", view.Code, want)
	}
	if bytes.Contains(r.body, []byte("lr = 3e-4")) || bytes.Contains(r.body, []byte("ghp_secret")) {
		t.Fatalf("the Task carries the diff or the remote's token: %s", r.body)
	}
	if l := e.req("GET", "/api/tasks", alice, nil); bytes.Contains(l.body, []byte("lr = 3e-4")) || !bytes.Contains(l.body, []byte(`"hasDiff":true`)) {
		t.Fatalf("the list carries the diff, or not hasDiff: %s", l.body)
	}

	// The owner and an admin read it; anyone else is refused.
	for _, tok := range []string{alice, root} {
		r := e.req("GET", "/api/tasks/"+id+"/code.diff", tok, nil)
		if r.status != http.StatusOK || string(r.body) != diff {
			t.Fatalf("code.diff: %d %q", r.status, r.body)
		}
		if ct := r.header.Get("Content-Type"); ct != "text/x-diff; charset=utf-8" {
			t.Errorf("code.diff Content-Type %q", ct)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(r.header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("code.diff may be sniffed or scripted: %v", r.header)
		}
		etag := r.header.Get("ETag")
		if len(etag) != 66 {
			t.Fatalf("code.diff ETag %q, want the quoted sha256", etag)
		}
		if r := e.req("GET", "/api/tasks/"+id+"/code.diff", tok, nil, "If-None-Match", etag); r.status != http.StatusNotModified || len(r.body) != 0 {
			t.Fatalf("code.diff If-None-Match: %d %q", r.status, r.body)
		}
	}
	if r := e.req("GET", "/api/tasks/"+id+"/code.diff", bob, nil); r.status != http.StatusForbidden || r.errCode(t) != "forbidden" {
		t.Fatalf("code.diff for another user: %d %s", r.status, r.body)
	}
	if r := e.req("GET", "/api/tasks/"+id+"/code.diff", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("code.diff signed out: %d %s", r.status, r.body)
	}

	// No diff: 404 saying why.
	f404 := func(body, wantMsg string) {
		t.Helper()
		id := e.submit(alice, body)
		r := e.req("GET", "/api/tasks/"+id+"/code.diff", alice, nil)
		if r.status != http.StatusNotFound || r.errCode(t) != "not_found" || !strings.Contains(string(r.body), wantMsg) {
			t.Fatalf("code.diff of %s: %d %s, want 404 with %q", body, r.status, r.body, wantMsg)
		}
		if got := e.task(id); got.Code.HasDiff {
			t.Fatalf("%s: stored with HasDiff", body)
		}
	}
	f404(`{"command":["x"]}`, "no stored diff")
	f404(`{"command":["x"],"code":{"gitCommit":"abc","gitDirty":false}}`, "clean")
	f404(`{"command":["x"],"code":{"gitCommit":"abc","gitDirty":true,"diffOmitted":"the diff is 3.0 MiB, over the 2 MiB limit"}}`, "3.0 MiB")
	for _, p := range []string{"/api/tasks/r-unknown/code.diff", "/api/tasks/" + id + "/code.diff/x"} {
		if r := e.req("GET", p, alice, nil); r.status != http.StatusNotFound {
			t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
	}
	if r := e.req("GET", "/api/tasks/..%2Fx/code.diff", alice, nil); r.status != http.StatusBadRequest {
		t.Fatalf("bad id: %d %s", r.status, r.body)
	}

	// A rerun by the owner shares the diff; by another user it has none and
	// says why; a rerun that sends code replaces it.
	rerun := func(tok, body string) core.Task {
		t.Helper()
		var b any
		if body != "" {
			b = body
		}
		r := e.req("POST", "/api/tasks/"+id+"/rerun", tok, b)
		if r.status != http.StatusAccepted {
			t.Fatalf("rerun: %d %s", r.status, r.body)
		}
		return e.task(r.json(t)["id"].(string))
	}
	n := rerun(alice, "")
	if o := e.task(id); n.Code != o.Code {
		t.Fatalf("owner's rerun code %+v, want the original's %+v", n.Code, o.Code)
	}
	if r := e.req("GET", "/api/tasks/"+n.ID+"/code.diff", alice, nil); r.status != http.StatusOK || string(r.body) != diff {
		t.Fatalf("rerun's code.diff: %d %q", r.status, r.body)
	}
	n = rerun(bob, "")
	if n.Code.HasDiff || n.Code.DiffID != "" || n.Code.GitCommit != "c0ffee" || !strings.Contains(n.Code.DiffOmitted, "only to its owner") {
		t.Fatalf("another user's rerun code %+v", n.Code)
	}
	n = rerun(alice, `{"code":{"gitCommit":"beef","gitDirty":true,"diff":"+new\n"}}`)
	if r := e.req("GET", "/api/tasks/"+n.ID+"/code.diff", alice, nil); n.Code.GitCommit != "beef" || r.status != http.StatusOK || string(r.body) != "+new\n" {
		t.Fatalf("rerun with new code: %+v; code.diff %d %q", n.Code, r.status, r.body)
	}
	n = rerun(alice, `{"code":{"gitCommit":"beef","gitDirty":false}}`)
	if n.Code.HasDiff {
		t.Fatalf("a rerun sending code without a diff kept the old one: %+v", n.Code)
	}

	// Bad code fields.
	fBad := func(code, wantMsg string) {
		t.Helper()
		r := e.req("POST", "/api/train", alice, `{"command":["x"],"code":`+code+`}`)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), wantMsg) {
			t.Fatalf("code %.60s: %d %s, want 400 with %q", code, r.status, r.body, wantMsg)
		}
	}
	fBad(`{"gitCommit":"`+strings.Repeat("a", 65)+`"}`, "gitCommit")
	fBad(`{"gitRemote":"https://h/`+strings.Repeat("a", 1100)+`"}`, "gitRemote")
	fBad(`{"diffOmitted":"`+strings.Repeat("a", 201)+`"}`, "diffOmitted")
	fBad(`{"diff":7}`, "diff")
}

// TestGzipBodies: a body sent gzip-compressed is inflated before the
// handler reads it, so a 2 MiB diff fits the 1 MiB on the wire; what it
// inflates to is bounded; other encodings are 415.
func TestGzipBodies(t *testing.T) {
	e := newEnv(t)
	alice, _ := e.user("alice")
	// The largest diff, of lines that JSON escapes (quotes, tabs).
	line := "+\t\"x\" = 'y'  \\ value\n"
	diff := strings.Repeat(line, core.MaxCodeDiffBytes/len(line))
	body, _ := json.Marshal(map[string]any{"command": []string{"x"}, "code": map[string]any{"gitCommit": "c", "gitDirty": true, "diff": diff}})
	if len(body) <= MaxBodySize {
		t.Fatalf("test body of %d bytes is not over the wire limit", len(body))
	}
	if r := e.req("POST", "/api/train", alice, body); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("uncompressed %d bytes: %d %s", len(body), r.status, r.body)
	}
	r := e.req("POST", "/api/train", alice, gzipped(t, body), "Content-Type", "application/json", "Content-Encoding", "gzip")
	if r.status != http.StatusAccepted {
		t.Fatalf("gzip submission: %d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	if r := e.req("GET", "/api/tasks/"+id+"/code.diff", alice, nil); r.status != http.StatusOK || string(r.body) != diff {
		t.Fatalf("code.diff of the gzip submission: %d, %d bytes", r.status, len(r.body))
	}
	// A rerun takes gzip too.
	if r := e.req("POST", "/api/tasks/"+id+"/rerun", alice, gzipped(t, []byte(`{"name":"again"}`)), "Content-Encoding", "gzip"); r.status != http.StatusAccepted {
		t.Fatalf("gzip rerun: %d %s", r.status, r.body)
	}
	// So does any other route, with the usual 1 MiB once inflated.
	login := gzipped(t, []byte(`{"username":"alice","password":"password-alice"}`))
	if r := e.req("POST", "/api/auth/login", "", login, "Content-Type", "application/json", "Content-Encoding", "GZIP"); r.status != http.StatusOK {
		t.Fatalf("gzip login: %d %s", r.status, r.body)
	}

	f := func(path string, body []byte, enc string, want int, wantMsg string) {
		t.Helper()
		r := e.req("POST", path, alice, body, "Content-Type", "application/json", "Content-Encoding", enc)
		if r.status != want {
			t.Fatalf("%s (%s, %d bytes): %d %s, want %d", path, enc, len(body), r.status, r.body, want)
		}
		r.errCode(t)
		if !strings.Contains(string(r.body), wantMsg) {
			t.Fatalf("%s (%s): %s lacks %q", path, enc, r.body, wantMsg)
		}
	}
	// A diff one byte over the limit.
	over, _ := json.Marshal(map[string]any{"command": []string{"x"}, "code": map[string]any{"diff": strings.Repeat("x", core.MaxCodeDiffBytes+1)}})
	f("/api/train", gzipped(t, over), "gzip", http.StatusBadRequest, "2 MiB")
	// Small on the wire, large inflated: stopped at the limit.
	bomb := gzipped(t, bytes.Repeat([]byte(" "), MaxSubmitBodySize+1))
	f("/api/train", bomb, "gzip", http.StatusRequestEntityTooLarge, "inflates")
	f("/api/auth/login", gzipped(t, bytes.Repeat([]byte(" "), MaxBodySize+1)), "gzip", http.StatusRequestEntityTooLarge, "inflates")
	f("/api/train", []byte(`{"command":["x"]}`), "gzip", http.StatusBadRequest, "not gzip")
	f("/api/train", gzipped(t, []byte(`{"command":["x"]}`))[:20], "gzip", http.StatusBadRequest, "damaged")
	f("/api/train", []byte(`{"command":["x"]}`), "br", http.StatusUnsupportedMediaType, "gzip")
	if n := len(e.req("GET", "/api/tasks", alice, nil).json(t)["items"].([]any)); n != 2 {
		t.Fatalf("%d runs stored, want the 2 accepted", n)
	}
}
