package testutil

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// SourceFile is a production (non-test) Go file of a package: its path,
// what it imports and its text, for the tests that keep a room to its
// rules (core imports nothing of the module, the planner reads no clock).
type SourceFile struct {
	Name    string
	Imports []string
	Src     string
}

// SourceFiles reads every non-test Go file of dir, failing t when there is
// none or one cannot be parsed.
func SourceFiles(t testing.TB, dir string) []SourceFile {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []SourceFile
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		sf := SourceFile{Name: name, Src: string(src)}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			sf.Imports = append(sf.Imports, p)
		}
		out = append(out, sf)
	}
	if len(out) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	return out
}
