package worker

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/rlsched/rlsched/codec/pb"
)

// groupEnv is what a member of a multi-node group sees (issue 29, API.md
// "Multi-node groups"): its rank, the group's size and hosts, and the
// variables torch.distributed's env:// rendezvous and torchrun read. The
// member is one process per worker, so RANK is its node's rank, WORLD_SIZE
// the number of nodes and LOCAL_RANK 0; torchrun --nproc_per_node starts
// one process per GPU and sets its own RANK, WORLD_SIZE and LOCAL_RANK
// from --nnodes and --node_rank, which (with --master_addr and
// --master_port) it also reads from PET_NNODES, PET_NODE_RANK,
// PET_MASTER_ADDR and PET_MASTER_PORT: a plain `torchrun
// --nproc_per_node=8 train.py` joins the group. Nil for a run on one
// worker.
func groupEnv(m *pb.ExecuteTask) []string {
	n, hosts := m.GetNodes(), m.GetHosts()
	if n <= 1 || len(hosts) == 0 {
		return nil
	}
	rank := strconv.Itoa(int(m.GetNodeRank()))
	nodes := strconv.Itoa(int(n))
	return []string{
		"RLSCHED_NODE_RANK=" + rank,
		"RLSCHED_NODES=" + nodes,
		"RLSCHED_HOSTS=" + strings.Join(hosts, ","),
		"RANK=" + rank,
		"NODE_RANK=" + rank,
		"LOCAL_RANK=0",
		"WORLD_SIZE=" + nodes,
		"MASTER_ADDR=" + hosts[0],
		"MASTER_PORT=" + strconv.Itoa(int(m.GetMasterPort())),
		"PET_NNODES=" + nodes,
		"PET_NODE_RANK=" + rank,
		"PET_MASTER_ADDR=" + hosts[0],
		"PET_MASTER_PORT=" + strconv.Itoa(int(m.GetMasterPort())),
	}
}

// pickMasterPort gives rank 0 of a group whose master sent no port a free
// TCP port of this worker (any address: the other members reach it at
// the address the master knows this worker by) as MASTER_PORT; the
// worker reports it in TaskStarted and the master starts the other
// members with it (docs/decisions.md, "Issue 29: the master runs groups").
// The port is free when picked and the run binds it within moments; a
// process that takes it meanwhile fails the rendezvous, and so the
// attempt, which the group's requeue or retry moves to another port.
func pickMasterPort(m *pb.ExecuteTask) error {
	if m.GetNodes() <= 1 || m.GetNodeRank() != 0 || m.GetMasterPort() != 0 {
		return nil
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return fmt.Errorf("cannot pick a free port for the group's MASTER_PORT: %w", err)
	}
	m.MasterPort = int32(ln.Addr().(*net.TCPAddr).Port)
	return ln.Close()
}

// startedPort is what rank 0's TaskStarted reports as the group's
// MASTER_PORT; 0 for any other run.
func startedPort(m *pb.ExecuteTask) int32 {
	if m.GetNodes() <= 1 || m.GetNodeRank() != 0 {
		return 0
	}
	return m.GetMasterPort()
}

// keepsOutputs reports whether the run's outputs (its output dir and its
// TensorBoard points) go to the master: a group's rank 0 keeps the run's,
// as torch's convention of saving from rank 0 expects; the other members'
// would overwrite them under the same names.
func keepsOutputs(m *pb.ExecuteTask) bool { return m.GetNodes() <= 1 || m.GetNodeRank() == 0 }
