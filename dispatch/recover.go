package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// recover rebuilds the registry from the store after a (re)start. The store
// is the truth: every DISPATCHED or RUNNING run gets its lease back for one
// TTL, so its worker can reconnect and re-adopt it with its fencing token;
// runs whose workers never come back are reaped as LOST.
func (m *Master) recover(ctx context.Context) error {
	max, err := m.st.MaxFence(ctx)
	if err != nil {
		return fmt.Errorf("cannot read the highest fence: %w", err)
	}
	if err := m.ls.EnsureFenceAbove(ctx, max); err != nil {
		return fmt.Errorf("cannot raise the fencing counter: %w", err)
	}
	active, err := m.st.ActiveTasks(ctx)
	if err != nil {
		return fmt.Errorf("cannot read active runs: %w", err)
	}
	for _, t := range active {
		if t.Worker == "" || t.Fence == 0 {
			m.lost(ctx, t.ID, t.Fence, "active run without a worker at master start")
			continue
		}
		err := m.ls.Restore(ctx, t.ID, t.Worker, t.Fence, m.cfg.LeaseTTL)
		if err != nil && !errors.Is(err, core.ErrLeaseHeld) {
			return fmt.Errorf("cannot restore the lease of %s: %w", t.ID, err)
		}
		m.reg.mu.Lock()
		m.reg.addRunLocked(&runRec{taskID: t.ID, attempt: t.Attempt, fence: t.Fence, traceID: t.TraceID,
			workerID: t.Worker, gpus: t.GPUIndices, started: t.Status == core.StatusRunning})
		m.reg.mu.Unlock()
	}
	if len(active) > 0 {
		m.log.Info().Int("runs", len(active)).Msg("waiting for workers to re-adopt active runs")
	}
	return nil
}
