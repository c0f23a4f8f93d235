package core

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNodes is the most workers one run may span (API.md "Dependencies,
// pipelines, multi-node groups": nodes 1–64).
const MaxNodes = 64

// Group is how many workers t spans at once: its members, rank 0 to
// Group()-1, each with t's GPUs, cores and memory on a worker of its own.
// A run stored before issue 29 (Nodes 0) is a group of one.
func (t *Task) Group() int { return max(t.Nodes, 1) }

// IsGroup reports whether t spans more than one worker.
func (t *Task) IsGroup() bool { return t.Nodes > 1 }

// CheckNodes refuses a nodes value outside 1..MaxNodes.
func CheckNodes(n int64) error {
	if n < 1 || n > MaxNodes {
		return fmt.Errorf("must be an integer from 1 to %d (the workers the run spans at once)", MaxNodes)
	}
	return nil
}

// LogFile is the name of the log of rank's member of run id in the
// masters' log directory: rank 0's (and a run on one worker's) is
// "<id>.log", another member's "<id>.rank<N>.log".
func LogFile(id string, rank int) string { return LogKey(id, rank) + ".log" }

// LogKey names the log of rank's member of run id where the log pipe keys
// its files (logpipe.Frame.TaskID): the run's id for rank 0, whose log is
// the run's (its metrics, final reward and live stream), "<id>.rank<N>"
// for another member's.
func LogKey(id string, rank int) string {
	if rank <= 0 {
		return id
	}
	return id + ".rank" + strconv.Itoa(rank)
}

// ParseLogKey splits a LogKey into the run's id and the member's rank;
// false when key is neither a valid run id nor one with a rank 1..MaxNodes-1.
func ParseLogKey(key string) (id string, rank int, ok bool) {
	if ValidTaskID(key) {
		return key, 0, true
	}
	i := strings.LastIndex(key, ".rank")
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(key[i+len(".rank"):])
	if err != nil || n < 1 || n >= MaxNodes || key[i+len(".rank"):] != strconv.Itoa(n) || !ValidTaskID(key[:i]) {
		return "", 0, false
	}
	return key[:i], n, true
}
