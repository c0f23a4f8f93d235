package e2e

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/testbin"
)

// rlschedBin is the binary under test: $RLSCHED_BIN, or built once by TestMain.
var rlschedBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() || runtime.GOOS != "linux" {
		// Every test skips itself (see newBed); nothing to build.
		os.Exit(m.Run())
	}
	bin, cleanup, err := testbin.Build("e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	rlschedBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}
