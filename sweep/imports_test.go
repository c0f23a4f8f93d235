package sweep

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
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
	".":                  {"core", "internal/clip", "sweep/goal", "sweep/earlystop", "sweep/tpe"},
	"goal":               nil,
	"tpe":                {"sweep/goal"},
	"earlystop":          {"sweep/goal"},
	"importance":         {"sweep/tpe"},
	"internal/reference": {"sweep/tpe"},
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
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !pureStd[path] && !allowed[path] {
					t.Errorf("%s imports %q: sweep's packages do no I/O, read no clock and import only %v of this module", name, path, own)
				}
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range globalRand.FindAllStringSubmatch(string(src), -1) {
				switch m[1] {
				case "Rand", "New", "NewPCG":
				default:
					t.Errorf("%s calls %s: draw only from the *rand.Rand the caller passes", name, m[0])
				}
			}
		}
	}
}
