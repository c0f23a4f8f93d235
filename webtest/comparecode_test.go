package webtest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// storeCodeTree uploads files (path → content) and stores their tree.
func storeCodeTree(t *testing.T, a *api, files map[string]string) string {
	t.Helper()
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
	return tree.Tree
}

// TestComparePageCodeDiff (issue 27): the compare page shows what differs
// from the first run's code snapshot to the other's (the added, modified
// and deleted files, a modified file's diff as text, never markup), at
// desktop and phone widths, without scrolling sideways on a phone.
func TestComparePageCodeDiff(t *testing.T) {
	needs(t)
	t.Parallel()
	s := startUp(t, 0)
	a := s.api().signup("lee")
	ta := storeCodeTree(t, a, map[string]string{"train.py": "lr = 1\nprint('<b>a</b>')\n", "old.txt": "gone\n"})
	tb := storeCodeTree(t, a, map[string]string{"train.py": "lr = 2\nprint('<b>a</b>')\n", "new.txt": "added\n"})
	ra := a.submit(map[string]any{"name": "code-a", "command": []string{"true"}, "code": map[string]any{"tree": ta}})
	rb := a.submit(map[string]any{"name": "code-b", "command": []string{"true"}, "code": map[string]any{"tree": tb}})

	b := newBrowser(t)
	b.signIn(s.url, "lee")
	for _, vp := range []struct {
		name string
		w, h int64
	}{{"desktop", 1400, 1000}, {"phone", 390, 844}} {
		if vp.name == "phone" {
			b.do("phone viewport", chromedp.EmulateViewport(vp.w, vp.h, chromedp.EmulateMobile))
		} else {
			b.do("desktop viewport", chromedp.EmulateViewport(vp.w, vp.h))
		}
		b.open(s.url + "/compare?ids=" + ra + "," + rb)
		b.wait("the code diff", 30*time.Second, fmt.Sprintf(`document.querySelectorAll('#code-compare .code-pair[data-other=%q] .code-change').length === 3`, rb))
		got := eval[string](b, `[...document.querySelectorAll('#code-compare .code-change')].map((e) => e.dataset.path + ':' + e.querySelector('.badge').textContent).join(',')`)
		if got != "new.txt:A,train.py:M,old.txt:D" {
			t.Errorf("%s: the changes %q", vp.name, got)
		}
		b.click(`#code-compare details[data-path="train.py"] > summary`)
		b.wait("the diff", 10*time.Second, `document.querySelector('#code-compare details[data-path="train.py"]').open`)
		diff := b.text(`#code-compare details[data-path="train.py"] pre`)
		if want := "@@ -1,2 +1,2 @@\n"; len(diff) < len(want) || diff[:len(want)] != want || !strings.Contains(diff, "-lr = 1\n") || !strings.Contains(diff, "+lr = 2\n") {
			t.Errorf("%s: the diff of train.py %q", vp.name, diff)
		}
		if eval[bool](b, `document.querySelector('#code-compare b') !== null`) {
			t.Fatalf("%s: a diff was rendered as markup", vp.name)
		}
		if vp.name == "phone" && eval[bool](b, `document.documentElement.scrollWidth > window.innerWidth + 1`) {
			t.Error("the compare page with a code diff scrolls sideways on a phone")
		}
		b.screenshot("27-compare-code-" + vp.name)
	}
}
