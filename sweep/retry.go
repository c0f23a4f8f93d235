package sweep

import "github.com/rlsched/rlsched/core"

// Retryable reports whether a member whose latest run is in status s gets a
// new run on retry: only a run that ended without success (FAILED,
// CANCELLED, TIMEOUT). QUEUED, DISPATCHED,
// RUNNING and LOST (requeued while retries last) are still active, and a
// SUCCEEDED member is done.
func Retryable(s core.Status) bool {
	return s == core.StatusFailed || s == core.StatusCancelled || s == core.StatusTimeout
}

// RetryMembers returns the indexes, in order, of the members whose latest
// run's status (latest[i] for member i) is Retryable. The new runs are
// QUEUED, so a second call right after the first selects none of them.
func RetryMembers(latest []core.Status) []int {
	var out []int
	for i, s := range latest {
		if Retryable(s) {
			out = append(out, i)
		}
	}
	return out
}
