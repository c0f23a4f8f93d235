package core

import (
	"fmt"
	"strconv"
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
func LogFile(id string, rank int) string {
	if rank <= 0 {
		return id + ".log"
	}
	return id + ".rank" + strconv.Itoa(rank) + ".log"
}
