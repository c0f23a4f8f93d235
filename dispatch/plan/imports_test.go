package plan

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Plan stays pure because this package cannot reach a lock, a clock or
// I/O: besides core it may import only these.
var pureImports = map[string]bool{
	"cmp": true, "fmt": true, "maps": true, "math": true, "slices": true, "sort": true, "strings": true,
	"github.com/rlsched/rlsched/core": true,
}

func TestPlanImportsNothingImpure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
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
			if !pureImports[path] {
				t.Errorf("%s imports %q: the planner must not lock, read a clock or do I/O (see the package comment)", name, path)
			}
		}
	}
}
