//go:build unix && !linux

package isolation

var sharedScratch []string

func RemoveLeftovers(uint32, []string) (int, error) { return 0, errNoProc }
