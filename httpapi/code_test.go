package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/artifact/disk"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
)

func sumOf(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// storeTree uploads files (path → content) and stores their manifest; it
// returns the tree hash and how many blobs had to be uploaded.
func storeTree(t *testing.T, e *testEnv, tok string, files map[string]string) (string, int) {
	t.Helper()
	var m codetree.Manifest
	var sums []string
	for p, c := range files {
		m.Files = append(m.Files, codetree.File{Path: p, Mode: codetree.ModeFile, Size: int64(len(c)), SHA256: sumOf([]byte(c))})
		sums = append(sums, sumOf([]byte(c)))
	}
	q, _ := json.Marshal(map[string]any{"sha256": sums})
	r := e.req("POST", "/api/code/missing", tok, q)
	if r.status != http.StatusOK {
		t.Fatalf("missing: %d %s", r.status, r.body)
	}
	var miss struct{ Missing []string }
	_ = json.Unmarshal(r.body, &miss)
	for _, c := range files {
		for _, s := range miss.Missing {
			if s == sumOf([]byte(c)) {
				if r := e.req("PUT", "/api/code/blobs/"+s, tok, []byte(c)); r.status != http.StatusCreated && r.status != http.StatusNoContent {
					t.Fatalf("put blob: %d %s", r.status, r.body)
				}
			}
		}
	}
	b, _ := json.Marshal(m)
	r = e.req("POST", "/api/code/trees", tok, b)
	if r.status != http.StatusCreated {
		t.Fatalf("tree: %d %s", r.status, r.body)
	}
	var a struct{ Tree string }
	_ = json.Unmarshal(r.body, &a)
	return a.Tree, len(miss.Missing)
}

func TestCode_UploadSubmitAndRead(t *testing.T) {
	e, _ := artifactEnv(t)
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	tree, uploaded := storeTree(t, e, tok, map[string]string{"train.py": "print(1)\n", "exp/cfg.yaml": "lr: 1\n"})
	if uploaded != 2 {
		t.Fatalf("uploaded %d blobs, want 2", uploaded)
	}
	// Again with one file changed: one blob to upload.
	tree2, uploaded := storeTree(t, e, tok, map[string]string{"train.py": "print(2)\n", "exp/cfg.yaml": "lr: 1\n"})
	if uploaded != 1 || tree2 == tree {
		t.Fatalf("second tree: uploaded %d blobs, tree %s (first %s)", uploaded, tree2, tree)
	}
	id := e.submit(tok, fmt.Sprintf(`{"command":["python","../train.py"],"code":{"tree":%q,"subdir":"exp"}}`, tree))
	got := e.req("GET", "/api/tasks/"+id, tok, nil).json(t)["code"].(map[string]any)
	if got["tree"] != tree || got["subdir"] != "exp" {
		t.Fatalf("task code %v", got)
	}
	r := e.req("GET", "/api/tasks/"+id+"/code", bobTok, nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"path":"exp/cfg.yaml"`) || !strings.Contains(string(r.body), tree) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	r = e.req("GET", "/api/tasks/"+id+"/code/train.py", tok, nil)
	if r.status != http.StatusOK || string(r.body) != "print(1)\n" {
		t.Fatalf("file: %d %q", r.status, r.body)
	}
	if r := e.req("GET", "/api/tasks/"+id+"/code/nope.py", tok, nil); r.status != http.StatusNotFound {
		t.Fatalf("missing file: %d %s", r.status, r.body)
	}
	// A rerun keeps the snapshot.
	r = e.req("POST", "/api/tasks/"+id+"/rerun", tok, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("rerun: %d %s", r.status, r.body)
	}
	re := e.req("GET", "/api/tasks/"+r.json(t)["id"].(string), tok, nil).json(t)["code"].(map[string]any)
	if re["tree"] != tree || re["subdir"] != "exp" {
		t.Fatalf("rerun code %v", re)
	}
	// A sweep's members run its base's snapshot.
	r = e.req("POST", "/api/sweeps", tok, fmt.Sprintf(`{"base":{"command":["x"],"code":{"tree":%q}},"grid":{"lr":[1,2]}}`, tree2))
	if r.status != http.StatusAccepted && r.status != http.StatusCreated {
		t.Fatalf("sweep: %d %s", r.status, r.body)
	}
	sw := r.json(t)
	members := sw["runs"].([]any)
	for _, m := range members {
		if c := e.req("GET", "/api/tasks/"+m.(string), tok, nil).json(t)["code"].(map[string]any); c["tree"] != tree2 {
			t.Fatalf("sweep member code %v", c)
		}
	}
	// A sweep retry runs the snapshot the member ran, not a new one.
	e.finish(members[0].(string), core.StatusFailed)
	r = e.req("POST", "/api/sweeps/"+sw["id"].(string)+"/retry", tok, nil, "Content-Type", "application/json")
	if r.status != http.StatusAccepted {
		t.Fatalf("sweep retry: %d %s", r.status, r.body)
	}
	retried := r.json(t)["runs"].([]any)
	if len(retried) != 1 {
		t.Fatalf("sweep retry queued %v, want one run", retried)
	}
	if c := e.req("GET", "/api/tasks/"+retried[0].(string), tok, nil).json(t)["code"].(map[string]any); c["tree"] != tree2 {
		t.Fatalf("the retried member's code %v, want the tree %s", c, tree2)
	}
	private := e.submit(tok, fmt.Sprintf(`{"command":["x"],"private":true,"code":{"tree":%q}}`, tree))
	if r := e.req("GET", "/api/tasks/"+private+"/code", bobTok, nil); r.status != http.StatusForbidden {
		t.Fatalf("another's private run's code: %d %s", r.status, r.body)
	}
}

func TestCode_BadInput(t *testing.T) {
	blobs, err := disk.Open(filepath.Join(t.TempDir(), "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, func(c *Config) { c.Blobs, c.CodeLimits = blobs, codetree.Limits{MaxBytes: 1 << 20, MaxFiles: 3} })
	tok, _ := e.user("alice")
	x := sumOf([]byte("x"))
	if r := e.req("PUT", "/api/code/blobs/"+x, tok, []byte("y")); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "sha256") {
		t.Fatalf("wrong bytes: %d %s", r.status, r.body)
	}
	if r := e.req("PUT", "/api/code/blobs/XYZ", tok, []byte("y")); r.status != http.StatusBadRequest {
		t.Fatalf("bad digest: %d %s", r.status, r.body)
	}
	if r := e.req("PUT", "/api/code/blobs/"+x, tok, []byte("x")); r.status != http.StatusCreated {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	link := func(p, target string) string {
		return fmt.Sprintf(`{"path":%q,"mode":"120000","size":%d,"sha256":%q,"target":%q}`, p, len(target), sumOf([]byte(target)), target)
	}
	file := func(p string, size int) string {
		return fmt.Sprintf(`{"path":%q,"mode":"100644","size":%d,"sha256":%q}`, p, size, x)
	}
	f := func(files, want string) {
		t.Helper()
		r := e.req("POST", "/api/code/trees", tok, `{"files":[`+files+`]}`)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), want) {
			t.Fatalf("%s: %d %s, want 400 with %q", files, r.status, r.body, want)
		}
	}
	f(file("../x", 1), "clean")
	f(file("/etc/x", 1), "relative")
	f(file("a//b", 1), "clean")
	f(link("a", "/etc/passwd"), "outside")
	f(link("d/a", "../../x"), "outside")
	f(link("d/c", "..")+","+link("a", "d/c/.."), "outside")
	f(file("a", 1)+","+file("a/b", 1), "below")
	f(file("a", 1)+","+file("b", 1)+","+file("c", 1)+","+file("d", 1), "CODE_MAX_FILES")
	f(file("a", 2), "has 1 bytes")
	f(fmt.Sprintf(`{"path":"big","mode":"100644","size":%d,"sha256":%q,"chunks":[%q,%q]}`, 2<<20, x, x, x), "CODE_MAX_MB")
	f(file("m", 1)[:len(file("m", 1))-1]+`,"mode":"100777"}`, "")
	f(fmt.Sprintf(`{"path":"n","mode":"100644","size":5,"sha256":%q}`, sumOf([]byte("hello"))), "not uploaded")
	// A link inside is fine.
	if r := e.req("POST", "/api/code/trees", tok, `{"files":[`+file("d/x", 1)+","+link("d/l", "../d/x")+`]}`); r.status != http.StatusCreated {
		t.Fatalf("good tree: %d %s", r.status, r.body)
	}
	r := e.req("POST", "/api/train", tok, `{"command":["x"],"code":{"tree":"`+sumOf([]byte("nope"))+`"}}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "code.tree") {
		t.Fatalf("unknown tree: %d %s", r.status, r.body)
	}
	r = e.req("POST", "/api/train", tok, `{"command":["x"],"code":{"tree":"`+x+`","subdir":"../up"}}`)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "code.subdir") {
		t.Fatalf("bad subdir: %d %s", r.status, r.body)
	}
}
