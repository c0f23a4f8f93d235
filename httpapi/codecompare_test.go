package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// GET /api/tasks/{id}/code-diff/{other}: added, modified (with its
// unified diff) and deleted paths from one run's tree to another's; the
// same tree says so; a private run of another user, a run without a
// snapshot and a bad id are refused.
func TestCodeCompare(t *testing.T) {
	e, _ := artifactEnv(t)
	tok, _ := e.user("alice")
	bobTok, _ := e.user("bob")
	ta, _ := storeTree(t, e, tok, map[string]string{"train.py": "a\nb\nc\n", "old.txt": "gone\n", "same.txt": "x\n"})
	tb, _ := storeTree(t, e, tok, map[string]string{"train.py": "a\nB\nc\n", "new.txt": "added\n", "same.txt": "x\n"})
	a := e.submit(tok, fmt.Sprintf(`{"command":["x"],"code":{"tree":%q}}`, ta))
	b := e.submit(tok, fmt.Sprintf(`{"command":["x"],"code":{"tree":%q}}`, tb))
	a2 := e.submit(tok, fmt.Sprintf(`{"command":["x"],"code":{"tree":%q}}`, ta))
	r := e.req("GET", "/api/tasks/"+a+"/code-diff/"+b, bobTok, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var ans struct {
		TreeA, TreeB string
		Same         bool
		Files        []struct{ Path, Change, Diff string }
	}
	if err := json.Unmarshal(r.body, &ans); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range ans.Files {
		got = append(got, f.Change+" "+f.Path)
	}
	if ans.Same || ans.TreeA != ta || ans.TreeB != tb || strings.Join(got, ",") != "A new.txt,M train.py,D old.txt" {
		t.Fatalf("answer %s", r.body)
	}
	if d := ans.Files[1].Diff; !strings.HasPrefix(d, "@@ -1,3 +1,3 @@\n a\n") || !strings.Contains(d, "\n-b\n") || !strings.Contains(d, "\n+B\n") {
		t.Fatalf("diff of train.py %q", d)
	}
	if r := e.req("GET", "/api/tasks/"+a+"/code-diff/"+a2, tok, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"same":true`) {
		t.Fatalf("the same tree: %d %s", r.status, r.body)
	}
	private := e.submit(tok, fmt.Sprintf(`{"command":["x"],"private":true,"code":{"tree":%q}}`, tb))
	none := e.submit(tok, `{"command":["x"]}`)
	for _, c := range []struct {
		path, tok string
		want      int
	}{
		{"/api/tasks/" + a + "/code-diff/" + private, bobTok, http.StatusForbidden},
		{"/api/tasks/" + a + "/code-diff/" + none, tok, http.StatusNotFound},
		{"/api/tasks/" + a + "/code-diff/a.b", tok, http.StatusBadRequest},
	} {
		if r := e.req("GET", c.path, c.tok, nil); r.status != c.want {
			t.Errorf("%s: %d %s, want %d", c.path, r.status, r.body, c.want)
		}
	}
}
