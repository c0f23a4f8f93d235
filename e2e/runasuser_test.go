package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestRunAsUserRefusedByAnOpenMaster (issue 25): a standalone worker with
// RUN_AS=user warns at start, and a master where anyone may register
// refuses it; both logs say why, and the worker never joins.
func TestRunAsUserRefusedByAnOpenMaster(t *testing.T) {
	testutil.NeedRoot(t)
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{}) // REGISTRATION=open (MasterEnv)
	w := b.StartWorker("worker", m.RPC, rig.WorkerOpts{ID: "w-user", Env: []string{"RUN_AS=user"}})
	w.WaitLog(t, 30*time.Second, "the RUN_AS=user warning", func(l logLine) bool {
		return strings.Contains(l.Msg(), "REGISTRATION=open refuses this worker")
	})
	m.WaitLog(t, 30*time.Second, "the refusal", func(l logLine) bool {
		return strings.HasPrefix(l.Msg(), "refusing worker: ") && strings.Contains(l.Msg(), "RUN_AS=user") && l.Str("worker") == "w-user"
	})
	w.WaitLog(t, 30*time.Second, "the master's reason", func(l logLine) bool {
		return strings.HasPrefix(l.Msg(), "master refused this worker") && strings.Contains(l.Str("error"), "REGISTRATION=open")
	})
	var ws struct{ Items []struct{ ID string } }
	admin, _ := signup(t, m.URL, "root", "ADMIN")
	admin.Must("GET", "/api/workers", nil, 200, &ws)
	if len(ws.Items) != 0 {
		t.Fatalf("the refused worker is listed: %+v", ws.Items)
	}
}
