package dispatch

import (
	"os"
	"runtime"
	"testing"
)

// A started master leaves a P to the runtime's netpoller beside gnet's
// pollers (procs.go): GOMAXPROCS defaults to at most the CPUs, and Start
// adds the event loops and the acceptor.
func TestStartReservesProcsForThePollers(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set: the operator's value stands")
	}
	newHarness(t, nil)
	if got, least := runtime.GOMAXPROCS(0), runtime.NumCPU()+2; got < least {
		t.Fatalf("GOMAXPROCS %d after Start, want at least %d (a CPU's P plus %d event loops and the acceptor)", got, least, runtime.NumCPU())
	}
}
