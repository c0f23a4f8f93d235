package leaseguard

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	MaybeServe() // the test binary is also the guards it starts
	if _, ok := os.LookupEnv("GORACE"); !ok {
		// Guards are this binary too; under -race each would sleep 1s on exit.
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}
