//go:build !linux

package nvsmi

import "errors"

// Without /proc no compute process can be placed in a run's group; every one
// stays unresolved, and the Sampler says so.
func newProcReader(string) (procReader, error) {
	return nil, errors.New("foreign-process detection needs Linux's /proc")
}
