package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
)

// A member of a multi-node group sees its rank, the group and the
// rendezvous torch.distributed reads; a run on one worker sees none of it.
func TestGroupMemberEnv(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.Slots = 2 })
	mc := m.next(t)
	show := []string{"sh", "-c", `env | grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK|NODE_RANK|MASTER_ADDR|MASTER_PORT|RLSCHED_NODE_RANK|RLSCHED_NODES|RLSCHED_HOSTS|PET_[A-Z_]*)=' | sort; echo ready`}
	mc.send(&pb.ExecuteTask{TaskId: "g", Attempt: 1, Fence: 1, Argv: show, NodeRank: 1, Nodes: 3,
		Hosts: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, MasterPort: 29517})
	mc.started(t, "g")
	mc.send(&pb.ExecuteTask{TaskId: "one", Attempt: 1, Fence: 1, Argv: show})
	mc.started(t, "one")
	waitFor(t, 10*time.Second, "the env of g", func() bool { return strings.Contains(m.log("g", 1), "ready") })
	want := "LOCAL_RANK=0\nMASTER_ADDR=10.0.0.1\nMASTER_PORT=29517\nNODE_RANK=1\n" +
		"PET_MASTER_ADDR=10.0.0.1\nPET_MASTER_PORT=29517\nPET_NNODES=3\nPET_NODE_RANK=1\nRANK=1\n" +
		"RLSCHED_HOSTS=10.0.0.1,10.0.0.2,10.0.0.3\nRLSCHED_NODES=3\nRLSCHED_NODE_RANK=1\nWORLD_SIZE=3\nready\n"
	if got := m.log("g", 1); got != want {
		t.Fatalf("member sees\n%s\nwant\n%s", got, want)
	}
	waitFor(t, 10*time.Second, "the env of one", func() bool { return strings.Contains(m.log("one", 1), "ready") })
	if got := m.log("one", 1); got != "ready\n" {
		t.Fatalf("a run on one worker sees\n%s", got)
	}
}

// Rank 0 of a group the master sent no port picks a free one, runs with it
// as MASTER_PORT and reports it in its TaskStarted; a member of another
// rank reports none.
func TestGroupRankZeroPicksPort(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.Slots = 2 })
	mc := m.next(t)
	show := []string{"sh", "-c", `echo "port=$MASTER_PORT"`}
	mc.send(&pb.ExecuteTask{TaskId: "g0", Attempt: 1, Fence: 1, Argv: show, NodeRank: 0, Nodes: 2, Hosts: []string{"10.0.0.1", "10.0.0.2"}})
	st := mc.started(t, "g0")
	if st.GetMasterPort() <= 0 || st.GetMasterPort() > 65535 {
		t.Fatalf("rank 0's TaskStarted reports port %d", st.GetMasterPort())
	}
	want := fmt.Sprintf("port=%d\n", st.GetMasterPort())
	waitFor(t, 10*time.Second, "rank 0's port in its env", func() bool { return m.log("g0", 1) == want })
	mc.send(&pb.ExecuteTask{TaskId: "g1", Attempt: 1, Fence: 1, Argv: show, NodeRank: 1, Nodes: 2, Hosts: []string{"10.0.0.1", "10.0.0.2"}, MasterPort: 29600})
	if p := mc.started(t, "g1").GetMasterPort(); p != 0 {
		t.Fatalf("rank 1's TaskStarted reports port %d", p)
	}
	waitFor(t, 10*time.Second, "rank 1's port in its env", func() bool { return m.log("g1", 1) == "port=29600\n" })
}
