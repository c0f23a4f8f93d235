package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestGroupWaits (issue 29) on a real master and two real workers: a
// 2-node group is stored with its nodes and, since the master does not
// run a group's members yet, waits QUEUED with no_worker saying so, never
// started as one member; a run behind it starts.
func TestGroupWaits(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{})
	b.StartWorker("worker-n1", m.RPC, rig.WorkerOpts{ID: "n1"})
	b.StartWorker("worker-n2", m.RPC, rig.WorkerOpts{ID: "n2"})
	m.WaitJoined(t, "n1")
	m.WaitJoined(t, "n2")
	signup(t, m.URL, "admin", "ADMIN")
	user, _ := signup(t, m.URL, "nina", "USER")

	g, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "nodes": 2})
	one, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}})
	user.waitStatus(one, "RUNNING", 30*time.Second)
	var tk struct {
		Status        string `json:"status"`
		Nodes         int    `json:"nodes"`
		PendingCode   string `json:"pendingCode"`
		PendingReason string `json:"pendingReason"`
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		user.Must("GET", "/api/tasks/"+g, nil, 200, &tk)
		return tk.Status == "QUEUED" && tk.Nodes == 2 && tk.PendingCode == "no_worker" &&
			tk.PendingReason == "needs several workers at once, and this master does not run multi-node groups yet", fmt.Sprintf("%+v", tk)
	})
}
