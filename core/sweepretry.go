package core

// SweepRetried returns the statuses of a sweep member's latest run that a
// retry of the sweep reruns: a run that ended without success. QUEUED,
// DISPATCHED, RUNNING and LOST (requeued while retries last) are still
// active, and a SUCCEEDED member is done. A retry's new runs are QUEUED, so
// a second retry right after the first reruns none of them. The stores
// select the members with these statuses in SQL.
func SweepRetried() []Status {
	return []Status{StatusFailed, StatusCancelled, StatusTimeout}
}
