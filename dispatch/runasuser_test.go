package dispatch

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// TestRunAsUserRefusedWithOpenRegistration (issue 25): a worker whose runs
// run as the Unix account named like their user is refused, with the reason
// in both logs, by a master where anyone may register (anyone could become
// an existing account by registering its name); its other workers join, and
// a master with closed registration takes it.
func TestRunAsUserRefusedWithOpenRegistration(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.OpenRegistration = true })
	bye, ok := dial(t, h.m.Addr()).join(&pb.Hello{WorkerId: "w-user", Slots: 1, Isolation: core.IsolationUser}).(*pb.Goodbye)
	if !ok || !strings.Contains(bye.Reason, "RUN_AS=user") || !strings.Contains(bye.Reason, "REGISTRATION=open") {
		t.Fatalf("a RUN_AS=user worker beside open registration answered %v, want a Goodbye naming both", bye)
	}
	if log := h.logs.String(); !strings.Contains(log, "refusing worker") || !strings.Contains(log, "REGISTRATION=open") {
		t.Fatalf("the refusal is not logged:\n%s", log)
	}
	for _, w := range h.m.Workers() {
		if w.ID == "w-user" {
			t.Fatalf("the refused worker is listed: %+v", w)
		}
	}
	if _, ok := dial(t, h.m.Addr()).join(&pb.Hello{WorkerId: "w-uid", Slots: 1, Isolation: core.IsolationUID}).(*pb.HelloAck); !ok {
		t.Fatal("a worker with uids of its runs' own was refused")
	}
	closed := newClockedHarness(t, nil)
	if _, ok := dial(t, closed.m.Addr()).join(&pb.Hello{WorkerId: "w-user", Slots: 1, Isolation: core.IsolationUser}).(*pb.HelloAck); !ok {
		t.Fatal("a RUN_AS=user worker was refused by a master with closed registration")
	}
}
