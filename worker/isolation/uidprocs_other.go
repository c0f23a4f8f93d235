//go:build unix && !linux

package isolation

import (
	"errors"
	"time"
)

var errNoProc = errors.New("runs under their own uids need Linux (/proc, pidfds)")

func UIDProcesses(uint32) ([]int, error) { return nil, errNoProc }

func KillUID(uint32, time.Duration) (int, int, error) { return 0, 0, errNoProc }

func uidsMapped(UIDRange) error { return nil }
