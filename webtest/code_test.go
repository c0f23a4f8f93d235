package webtest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"
)

// TestRunPageSnapshot (issue 27): the run page lists the files of the
// code snapshot the run ran, collapsed until asked for, and shows a file's
// text (never as markup) when it is clicked.
func TestRunPageSnapshot(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("kim")
	files := map[string]string{"train.py": "print('<b>hi</b>')\n", "exp/cfg.yaml": "lr: 1\n"}
	var manifest []map[string]any
	for p, c := range files {
		h := sha256.Sum256([]byte(c))
		sum := hex.EncodeToString(h[:])
		if st, raw := a.do("PUT", "/api/code/blobs/"+sum, []byte(c)); st != 201 && st != 204 {
			t.Fatalf("blob: %d %s", st, raw)
		}
		manifest = append(manifest, map[string]any{"path": p, "mode": "100644", "size": len(c), "sha256": sum})
	}
	st, raw := a.do("POST", "/api/code/trees", map[string]any{"files": manifest})
	var tree struct{ Tree string }
	if err := json.Unmarshal(raw, &tree); st != 201 || err != nil {
		t.Fatalf("tree: %d %s", st, raw)
	}
	id := a.submit(map[string]any{"name": "snap-run", "command": []string{"python3", "../train.py"},
		"code": map[string]any{"tree": tree.Tree, "subdir": "exp"}})
	a.waitStatus(id, "SUCCEEDED", 90*time.Second)

	b := newBrowser(t)
	b.signIn(s.url, "kim")
	b.open(s.url + "/runs/" + id)
	b.wait("the snapshot", 20*time.Second, `document.querySelector('#code-tree') !== null`)
	if eval[bool](b, `document.querySelector('#code-tree').open`) {
		t.Error("the snapshot is open before anyone asked for it")
	}
	b.click("#code-tree > summary")
	b.wait("the file list", 15*time.Second, `document.querySelectorAll('#code-files a[data-path]').length === 2`)
	b.click(`#code-files a[data-path="train.py"]`)
	b.wait("the file", 15*time.Second, `document.querySelector('#code-file pre') !== null`)
	if got := b.text("#code-file pre"); got != files["train.py"] {
		t.Errorf("train.py shows %q", got)
	}
	if eval[bool](b, `document.querySelector('#code-file b') !== null`) {
		t.Fatal("a snapshot file was rendered as markup")
	}
	b.screenshot("27-run-snapshot")
}
