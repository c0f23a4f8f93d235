package dispatch

import (
	"os"
	"testing"

	"github.com/rlsched/rlsched/worker"
)

func TestMain(m *testing.M) {
	// The log pipe tests run real workers, whose guard process is this
	// test binary started again.
	worker.MaybeGuard()
	if _, ok := os.LookupEnv("GORACE"); !ok {
		// Guards are this binary too; under -race each would sleep 1s on exit.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}
