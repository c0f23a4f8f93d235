//go:build !unix

package gpuwatch

import "time"

func cpuTime() time.Duration { return -1 }
