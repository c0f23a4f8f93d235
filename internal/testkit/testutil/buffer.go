package testutil

import (
	"strings"
	"sync"
)

// SyncBuffer is a strings.Builder that several goroutines may write (a
// logger, a child's stderr) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
