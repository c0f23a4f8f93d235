// Package webtest drives the embedded dashboard in a real browser (Debian's
// chromium, headless, through chromedp) against the real binary started as
// `rlsched up`, the way a newcomer uses it. Screenshots of every page go to
// webtest/screenshots/ (ignored by git).
//
// Chromium is found as $RLSCHED_CHROMIUM, else chromium, chromium-browser,
// google-chrome on PATH. Without it the tests skip, or fail under CI=true.
package webtest

import (
	"testing"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

func TestMain(m *testing.M) { rig.Main(m) }
