//go:build !linux

package isolation

// RemoveLeftovers has nothing to remove off Linux, where no run has a uid of its
// own (RUN_AS=dynamic needs Linux).
func RemoveLeftovers(uid uint32) (removed int, err error) { return 0, nil }
