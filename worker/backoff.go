package worker

import "time"

// busyBackoffMin and busyBackoffMax bound the pause after a "busy" refusal:
// a full queue drains in a fraction of a second.
const (
	busyBackoffMin = 20 * time.Millisecond
	busyBackoffMax = time.Second
)
