package sweep

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// pureStd is the standard library sweep and its subpackages may import:
// nothing that reaches a clock, a file, the network or a lock.
var pureStd = map[string]bool{
	"bytes": true, "cmp": true, "crypto/sha256": true, "encoding/binary": true, "encoding/json": true,
	"errors": true, "fmt": true, "io": true, "math": true, "math/rand/v2": true, "regexp": true,
	"slices": true, "sort": true, "strconv": true, "strings": true, "unicode/utf8": true,
}

// ownImports is each package's allowed imports of this module, the
// direction sweep/doc.go states.
var ownImports = map[string][]string{
	".":          {"core", "internal/clip", "stats", "sweep/goal", "sweep/earlystop", "sweep/tpe"},
	"goal":       nil,
	"tpe":        {"sweep/goal"},
	"earlystop":  {"sweep/goal"},
	"importance": {"sweep/tpe"},
	"reference":  {"sweep/tpe"},
}

// globalRand is a call of math/rand/v2's global source; only a generator
// the caller passes may be drawn from.
var globalRand = regexp.MustCompile(`\brand\.([A-Z][A-Za-z0-9]*)`)

func TestPackagesStayPure(t *testing.T) {
	const module = "github.com/rlsched/rlsched/"
	// A new package under sweep/ must say here what it may import.
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if gos, _ := filepath.Glob(filepath.Join(path, "*.go")); len(gos) > 0 {
			if _, ok := ownImports[path]; !ok {
				t.Errorf("package sweep/%s is not in ownImports", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, own := range ownImports {
		allowed := map[string]bool{}
		for _, p := range own {
			allowed[module+p] = true
		}
		for _, f := range testutil.SourceFiles(t, dir) {
			for _, path := range f.Imports {
				if !pureStd[path] && !allowed[path] {
					t.Errorf("%s imports %q: sweep's packages do no I/O, read no clock and import only %v of this module", f.Name, path, own)
				}
			}
			for _, m := range globalRand.FindAllStringSubmatch(f.Src, -1) {
				switch m[1] {
				case "Rand", "New", "NewPCG":
				default:
					t.Errorf("%s calls %s: draw only from the *rand.Rand the caller passes", f.Name, m[0])
				}
			}
		}
	}
}
