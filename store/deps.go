package store

import (
	"context"

	"github.com/rlsched/rlsched/core"
)

// Dependencies is the part of Store behind runs that wait for runs (issue
// 29, core/deps.go). A run created with After is stored waiting, its edges
// in the same transaction as its row; a waiting run is QUEUED but never in
// QueuedTasks' window, whatever its number. It is embedded in Store; every
// backend implements it.
type Dependencies interface {
	// WaitingChildren returns the waiting runs that have one of parents
	// among their parents, each once, by id.
	WaitingChildren(ctx context.Context, parents ...string) ([]string, error)
	// Parents returns each of children's parents, with its condition and
	// the parent's status now ("" for a parent not found), by parent id.
	// A run without parents is left out.
	Parents(ctx context.Context, children []string) (map[string][]core.ParentState, error)
	// ReleaseWaiting ends the wait of those of ids that are still QUEUED
	// and waiting: QueuedTasks sees them from now on. It returns how many
	// it released.
	ReleaseWaiting(ctx context.Context, ids []string) (int, error)
	// DecidableWaiting returns up to limit waiting runs, by id, that are
	// decided: none of their parents is still going, or one of them failed
	// its condition. A master reads them when it starts and now and then,
	// so a decision whose event was lost (a master that died between a
	// parent's end and its children's release) is still made.
	DecidableWaiting(ctx context.Context, limit int) ([]string, error)
}
