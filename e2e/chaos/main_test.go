package chaos

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// The soak's settings, from the environment (make chaos sets them).
const (
	// durationEnv is how long runs are submitted and faults injected, a Go
	// duration; the default keeps the soak inside `go test ./...`.
	durationEnv = "RLSCHED_CHAOS_DURATION"
	// seedEnv fixes the nemesis' and the submitter's random choices.
	seedEnv = "RLSCHED_CHAOS_SEED"
	// reportEnv is a directory for the summary (chaos-report.json and
	// .md); default: a new directory under the system's temp dir.
	reportEnv = "RLSCHED_CHAOS_REPORT"
	// knownEnv=skip skips the regression tests of violations known on the
	// tree (issue 11) and leaves their faults out of the soak.
	knownEnv = "RLSCHED_CHAOS_KNOWN"

	defaultDuration = 40 * time.Second
)

func TestMain(m *testing.M) { rig.Main(m) }

// needProcesses skips a test that starts the deployment under -short or
// where the binary cannot run.
func needProcesses(t *testing.T) {
	t.Helper()
	rig.Bin(t)
}

// soakDuration reads RLSCHED_CHAOS_DURATION.
func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv(durationEnv)
	if v == "" {
		return defaultDuration
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive Go duration such as 30m", durationEnv, v)
	}
	return d
}

// soakSeed reads RLSCHED_CHAOS_SEED, or picks one (logged, to rerun it).
func soakSeed(t *testing.T) int64 {
	t.Helper()
	v := os.Getenv(seedEnv)
	if v == "" {
		return time.Now().UnixNano()
	}
	s, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an integer", seedEnv, v)
	}
	return s
}

// skipKnown reports whether RLSCHED_CHAOS_KNOWN=skip asks to leave out
// what reproduces a violation known on the tree.
func skipKnown() bool { return os.Getenv(knownEnv) == "skip" }

// knownViolation skips t when RLSCHED_CHAOS_KNOWN=skip, naming the issue;
// by default it runs (and fails until the fix is in).
func knownViolation(t *testing.T, issue string) {
	t.Helper()
	if skipKnown() {
		t.Skipf("%s=skip: reproduces a violation known on this tree (%s); unset it once the fix is in", knownEnv, issue)
	}
}
