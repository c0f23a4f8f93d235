package worker

import (
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
// from --nnodes and --node_rank. Nil for a run on one worker.
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
	}
}
