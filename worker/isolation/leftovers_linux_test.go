//go:build linux

package isolation

import "testing"

// BenchmarkRemoveLeftovers is what a dynamic run's release costs on this
// machine's /tmp, /var/tmp and /dev/shm for a uid that left nothing.
func BenchmarkRemoveLeftovers(b *testing.B) {
	for b.Loop() {
		if _, err := RemoveLeftovers(61999); err != nil {
			b.Fatal(err)
		}
	}
}
