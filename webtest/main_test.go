// Package webtest drives the embedded dashboard in a real browser (Debian's
// chromium, headless, through chromedp) against the real binary started as
// `rlsched up`, the way a newcomer uses it. Screenshots of every page go to
// webtest/screenshots/ (ignored by git).
//
// Chromium is found as $RLSCHED_CHROMIUM, else chromium, chromium-browser,
// google-chrome on PATH. Without it the tests skip, or fail under CI=true.
package webtest

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
		os.Exit(m.Run()) // every test skips itself
	}
	bin, cleanup, err := testbin.Build("webtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "webtest:", err)
		os.Exit(1)
	}
	rlschedBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}
