package core

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// ioPackages are the standard packages through which code reaches a file, a
// socket, a process or a database. core is the domain only: the backends
// that do I/O live in rooms of their own (store, lease, artifact) and
// depend on core, never the reverse.
var ioPackages = []string{"os", "os/exec", "os/signal", "net", "net/http", "io/fs", "io/ioutil",
	"database/sql", "syscall", "plugin", "log", "embed"}

// TestCoreIsTheDomainOnly keeps core free of the module's other rooms and
// of I/O, so that a newcomer finds only domain types and rules here, and a
// backend can never be reached from the domain.
func TestCoreIsTheDomainOnly(t *testing.T) {
	for _, f := range testutil.SourceFiles(t, ".") {
		for _, path := range f.Imports {
			if strings.HasPrefix(path, "github.com/rlsched/rlsched/") {
				t.Errorf("%s imports %q: core imports nothing of this module (the rooms depend on core)", f.Name, path)
			}
			for _, io := range ioPackages {
				if path == io || strings.HasPrefix(path, "golang.org/x/sys") {
					t.Errorf("%s imports %q: core does no I/O; put the code in the room that does", f.Name, path)
				}
			}
		}
	}
	if sub, _ := filepath.Glob("*/*.go"); len(sub) > 0 {
		t.Errorf("core has sub-packages (%s): the backends and libraries live in rooms of their own", sub[0])
	}
}
