package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// A multi-node group (issue 29, core.Task.Nodes) is one run of N members
// on N workers, placed all at once (plan/group.go). In the store it is one
// Task: one status, one attempt, one fence and one lease, held by rank 0's
// worker (Task.Worker, Task.GPUs are rank 0's). The registry holds every
// member on its own worker (runRec.group, runRec.rank): rank 0 is the
// run's entry, the others are in their workers' runs only, so each
// worker's reports pass the one fence check (runRec.reports) and each
// member's GPUs are held where they are.
//
// The members start in two steps (docs/decisions.md, "Issue 29: the master
// runs groups"): rank 0 first, whose worker picks a free port and reports
// it in TaskStarted.master_port, then the others with that MASTER_PORT.
//
// The attempt ends once every member has: all exited 0, the run
// SUCCEEDED; a member that did not (its exit code, signal, timeout, start
// failure, cancel) stops the others at once (CancelTask with
// groupStopGrace) and the run ends as that member did, the Task's error
// naming its rank; a member lost (its worker disconnected or reconnected
// without it) stops the others and the run is requeued as a lost run is
// (reaper.lost: resuming from its outputs). A member that does not answer
// its stop within groupStopDeadline counts as ended, so a hung worker never
// holds the group.

// groupStopGrace is the SIGTERM-to-SIGKILL grace of a member stopped
// because another ended: the bound is 10 s from the loss to every
// member stopped, and a collective cannot go on without its peer anyway.
const groupStopGrace = 5 * time.Second

// groupStopDeadline is how long a stopped member's report is waited for.
const groupStopDeadline = 30 * time.Second

// defaultMasterPort is the MASTER_PORT when rank 0's worker reports none
// (a worker from before issue 29's port): torch's default.
const defaultMasterPort = 29500

// groupRun is one attempt of a group on this master.
type groupRun struct {
	members []*runRec // rank order; members[0] is the run's entry

	mu      sync.Mutex
	msg     *pb.ExecuteTask // rank 0's, without its restore list: the others' template
	sent    []bool          // its ExecuteTask was sent
	ended   []bool          // counted as ended
	left    int             // members not yet ended
	reports []*pb.TaskFinished
	failed  int    // rank of the first member that did not succeed; -1: none
	lost    string // why the attempt is lost; "": not lost
	stop    bool   // the surviving members were told to stop
	timer   *time.Timer
}

// newGroup makes the members of a placed group: rr0, rank 0, and one
// runRec per other member on workers[k] with gpus[k].
func newGroup(rr0 *runRec, workers []string, gpus [][]int) *groupRun {
	n := len(workers)
	g := &groupRun{members: make([]*runRec, n), sent: make([]bool, n), ended: make([]bool, n), left: n,
		reports: make([]*pb.TaskFinished, n), failed: -1}
	rr0.group, rr0.rank = g, 0
	g.members[0] = rr0
	for k := 1; k < n; k++ {
		g.members[k] = &runRec{taskID: rr0.taskID, attempt: rr0.attempt, traceID: rr0.traceID, workerID: workers[k],
			gpus: gpus[k], cpuMillis: rr0.cpuMillis, memoryMB: rr0.memoryMB, group: g, rank: k}
	}
	if rr0.pol != nil {
		// A member's preemption would be the group's: not done (the
		// preempter counts one worker's GPUs per run).
		rr0.pol.preemptible = false
	}
	return g
}

// groupMsg completes rank 0's ExecuteTask with the group's fields and keeps
// a copy, less the restore list (rank 0's alone), for the other members.
func (s *scheduler) groupMsg(g *groupRun, msg *pb.ExecuteTask) {
	msg.NodeRank, msg.Nodes, msg.Hosts = 0, int32(len(g.members)), s.reg.addrs(g.members)
	tpl := proto.Clone(msg).(*pb.ExecuteTask)
	tpl.Restore = nil
	g.mu.Lock()
	g.msg, g.sent[0] = tpl, true
	g.mu.Unlock()
}

// startMembers sends the other members their ExecuteTask once rank 0
// started, with the port it reported.
func (d *Dispatcher) startMembers(rr0 *runRec, port int32) {
	g := rr0.group
	if port <= 0 {
		port = defaultMasterPort
	}
	g.mu.Lock()
	if g.stop || g.msg == nil {
		g.mu.Unlock()
		return
	}
	type out struct {
		rr  *runRec
		msg *pb.ExecuteTask
	}
	var todo []out
	for k, m := range g.members[1:] {
		if g.sent[k+1] {
			continue
		}
		g.sent[k+1] = true
		msg := proto.Clone(g.msg).(*pb.ExecuteTask)
		msg.NodeRank, msg.MasterPort, msg.GpuIndices = int32(m.rank), port, nil
		msg.RunToken = codec.RunToken(d.cfg.JoinToken, m.workerID, msg.TaskId, msg.Attempt, msg.Fence)
		for _, i := range m.gpus {
			msg.GpuIndices = append(msg.GpuIndices, int32(i))
		}
		todo = append(todo, out{m, msg})
	}
	g.mu.Unlock()
	for _, o := range todo {
		sess := d.reg.startSession(o.rr)
		err := errNoSession
		if sess != nil {
			err = sess.send(o.msg)
		}
		if err != nil {
			d.memberEnded(o.rr, nil, fmt.Sprintf("rank %d's worker %s could not be sent its start: %v", o.rr.rank, o.rr.workerID, err))
			continue
		}
		d.workerChanged(o.rr.workerID)
		d.log.Info().Str("task", o.rr.taskID).Str("worker", o.rr.workerID).Int("rank", o.rr.rank).Int32("master_port", port).
			Msg("group member dispatched")
	}
	d.resendCancel(rr0) // a cancel requested meanwhile reaches the new members too
}

// memberOK reports whether a member's report is a success.
func memberOK(tf *pb.TaskFinished) bool {
	return tf != nil && tf.Outcome == pb.Outcome_OUTCOME_EXITED && tf.ExitCode == 0 && tf.Signal == ""
}

// memberEnded counts rr's member as ended, by its report tf (nil: none
// came), lost for why when why is not "". The first member that did not
// succeed stops the others; the last member's end records the group's
// (finishGroup). Safe from any goroutine; a member counts once.
func (d *Dispatcher) memberEnded(rr *runRec, tf *pb.TaskFinished, lost string) {
	g := rr.group
	g.mu.Lock()
	if g.ended[rr.rank] {
		g.mu.Unlock()
		return
	}
	g.ended[rr.rank], g.reports[rr.rank] = true, tf
	g.left--
	rr.memberDone.Store(true)
	if !memberOK(tf) && g.failed < 0 && g.lost == "" {
		if lost != "" {
			g.lost = lost
		} else {
			g.failed = rr.rank
		}
	}
	var stop, unsent []*runRec
	if !memberOK(tf) && !g.stop {
		g.stop = true
		for k, m := range g.members {
			switch {
			case g.ended[k]:
			case g.sent[k]:
				stop = append(stop, m)
			default: // never started: ended with the group
				g.ended[k] = true
				g.left--
				m.memberDone.Store(true)
				unsent = append(unsent, m)
			}
		}
		if len(stop) > 0 {
			g.timer = time.AfterFunc(groupStopDeadline, func() { d.stopOverdue(g) })
		}
	}
	last := g.left == 0
	if last && g.timer != nil {
		g.timer.Stop()
	}
	why := g.cause()
	g.mu.Unlock()

	for _, m := range append(unsent, rr) {
		d.reg.dropMember(m) // rank > 0: its worker is free at once
		if m.rank > 0 {
			d.logs.Forget(core.LogKey(m.taskID, m.rank))
			d.workerChanged(m.workerID)
			d.wakeScheduler()
		}
	}
	for _, m := range stop {
		d.stopMember(m, why)
	}
	if last {
		d.finishGroup(g)
	}
}

// cause says why the group's attempt ends early, for the stopped members'
// CancelTask and the logs. Under g.mu.
func (g *groupRun) cause() string {
	switch {
	case g.lost != "":
		return g.lost
	case g.failed >= 0:
		return fmt.Sprintf("rank %d of the group %s", g.failed, memberWhy(g.reports[g.failed]))
	}
	return ""
}

// memberWhy says how a member that did not succeed ended.
func memberWhy(tf *pb.TaskFinished) string {
	switch {
	case tf == nil:
		return "was lost"
	case tf.Outcome == pb.Outcome_OUTCOME_CANCELLED:
		return "was cancelled"
	case tf.Outcome == pb.Outcome_OUTCOME_TIMEOUT:
		return "timed out"
	case tf.Outcome == pb.Outcome_OUTCOME_START_FAILED:
		return "could not start: " + tf.Error
	case tf.Error != "":
		return "failed: " + tf.Error
	case tf.Signal != "":
		return "was killed by " + tf.Signal
	}
	return fmt.Sprintf("exited with code %d", tf.ExitCode)
}

// stopMember tells a member's worker to stop it because the group ends;
// a member whose worker is not connected is lost.
func (d *Dispatcher) stopMember(rr *runRec, why string) {
	sess := d.reg.session(rr)
	if sess == nil || sess.send(&pb.CancelTask{TaskId: rr.taskID, Attempt: int32(rr.attempt), Fence: rr.fence.Load(),
		Reason: "the multi-node group ends: " + why, GraceMs: groupStopGrace.Milliseconds()}) != nil {
		d.memberEnded(rr, nil, fmt.Sprintf("rank %d's worker %s is not connected", rr.rank, rr.workerID))
		return
	}
	d.log.Info().Str("task", rr.taskID).Str("worker", rr.workerID).Int("rank", rr.rank).Str("why", why).Msg("stopping a group member")
}

// stopOverdue counts the members that did not answer their stop as ended.
func (d *Dispatcher) stopOverdue(g *groupRun) {
	g.mu.Lock()
	var late []*runRec
	for k, m := range g.members {
		if !g.ended[k] {
			late = append(late, m)
		}
	}
	g.mu.Unlock()
	for _, m := range late {
		d.log.Warn().Str("task", m.taskID).Str("worker", m.workerID).Int("rank", m.rank).
			Msg("a group member did not stop in time; the group's attempt ends without its report")
		d.memberEnded(m, nil, fmt.Sprintf("rank %d on worker %s did not stop within %s", m.rank, m.workerID, groupStopDeadline))
	}
}

// memberFinished handles a member's TaskFinished (onFinished).
func (d *Dispatcher) memberFinished(rr *runRec, tf *pb.TaskFinished) {
	lost := ""
	if tf.Outcome == pb.Outcome_OUTCOME_LOST {
		lost = fmt.Sprintf("rank %d's worker %s stopped it: %s", rr.rank, rr.workerID, tf.Error)
	}
	d.log.Info().Str("task", rr.taskID).Str("worker", rr.workerID).Int("rank", rr.rank).Str("outcome", tf.Outcome.String()).
		Int32("exit", tf.ExitCode).Str("signal", tf.Signal).Msg("group member finished")
	d.memberEnded(rr, tf, lost)
}

// membersLost ends the members whose worker left (its session closed, or
// it came back with a new one): the group's attempt is lost.
func (d *Dispatcher) membersLost(workerID string, members []*runRec) {
	for _, rr := range members {
		d.memberEnded(rr, nil, fmt.Sprintf("rank %d's worker %s disconnected", rr.rank, workerID))
	}
}

// finishGroup records the end of a group whose members all ended: lost,
// requeued as a lost run is; else as its first member that did not
// succeed ended (its rank in the error), or SUCCEEDED.
func (d *Dispatcher) finishGroup(g *groupRun) {
	rr0 := g.members[0]
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	g.mu.Lock()
	lost, failed := g.lost, g.failed
	var final *pb.TaskFinished
	if failed >= 0 {
		final = proto.Clone(g.reports[failed]).(*pb.TaskFinished)
	} else if g.reports[0] != nil {
		final = proto.Clone(g.reports[0]).(*pb.TaskFinished)
	}
	g.mu.Unlock()
	if lost != "" || final == nil {
		if lost == "" {
			lost = "rank 0 was lost"
		}
		d.log.Warn().Str("task", rr0.taskID).Str("why", lost).Msg("a multi-node group's attempt is lost; requeueing it")
		d.runGone(ctx, rr0, "a member of the multi-node group was lost: "+lost)
		d.wakeScheduler()
		return
	}
	cancelled := d.reg.cancelRequested(rr0.taskID)
	tail := ""
	if failed >= 0 && !cancelled {
		final.Error = fmt.Sprintf("rank %d (worker %s) %s", failed, g.members[failed].workerID, memberWhy(g.reports[failed]))
		tail = d.errorTail(core.LogKey(rr0.taskID, failed), final, false)
	}
	final.TaskId, final.Attempt, final.Fence = rr0.taskID, int32(rr0.attempt), rr0.fence.Load()
	d.recordEnd(ctx, rr0, final, cancelled, tail)
}
