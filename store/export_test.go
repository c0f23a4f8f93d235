package store

// PendingUpdates is how many rows wait for a batch (not the one
// committing): updates, and creates too when they share the batches (a
// TaskWriter). The tests wait on it for callers to queue up.
func (b *Batcher) PendingUpdates() int {
	b.updates.mu.Lock()
	defer b.updates.mu.Unlock()
	return b.updates.rows
}
