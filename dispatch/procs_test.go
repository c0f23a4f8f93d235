package dispatch

import (
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
)

// A started master leaves a P to the runtime's netpoller beside gnet's
// pollers (procs.go): GOMAXPROCS defaults to at most the CPUs, and Start
// adds one for each event loop (one a P) and the acceptor.
func TestStartReservesProcsForThePollers(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set: the operator's value stands")
	}
	h := newHarness(t, nil)
	var started struct {
		Loops int `json:"event_loops"`
	}
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"dispatcher started"`) {
			if err := json.Unmarshal([]byte(line), &started); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The loops took one P each of those there were; the reservation
	// adds as many again, and one for the acceptor.
	if got := runtime.GOMAXPROCS(0); started.Loops == 0 || got < 2*started.Loops+1 {
		t.Fatalf("GOMAXPROCS %d after Start with %d event loops, want at least %d", got, started.Loops, 2*started.Loops+1)
	}
}
