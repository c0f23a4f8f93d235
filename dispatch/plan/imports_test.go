package plan

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Plan stays pure because this package cannot reach a lock, a clock or
// I/O: besides core it may import only these. time is there for its
// values (an instant in the Snapshot); clockReads keeps its clock out.
var pureImports = map[string]bool{
	"cmp": true, "fmt": true, "maps": true, "math": true, "math/bits": true, "slices": true, "sort": true, "strings": true,
	"time": true, "github.com/rlsched/rlsched/core": true,
}

// clockReads are the uses of package time that read or wait on a clock.
var clockReads = []string{"time.Now", "time.Since", "time.Until", "time.Sleep", "time.After", "time.Tick",
	"time.NewTimer", "time.NewTicker"}

func TestPlanImportsNothingImpure(t *testing.T) {
	for _, f := range testutil.SourceFiles(t, ".") {
		for _, c := range clockReads {
			if strings.Contains(f.Src, c) {
				t.Errorf("%s uses %s: the planner must not read a clock; the caller puts instants in the Snapshot", f.Name, c)
			}
		}
		for _, path := range f.Imports {
			if !pureImports[path] {
				t.Errorf("%s imports %q: the planner must not lock, read a clock or do I/O (see the package comment)", f.Name, path)
			}
		}
	}
}
