package artifactpipe

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLowerPriority: the calling goroutine's thread, and only it, is niced.
func TestLowerPriority(t *testing.T) {
	nice := func() int {
		p, err := unix.Getpriority(unix.PRIO_PROCESS, unix.Gettid())
		if err != nil {
			t.Fatal(err)
		}
		return 20 - p
	}
	got := make(chan [2]int)
	go func() {
		before := nice()
		lowerPriority()
		got <- [2]int{before, nice()}
	}()
	r := <-got
	if want := min(r[0]+backgroundNice, 19); r[1] != want {
		t.Fatalf("nice after lowerPriority: %d, want %d (before %d)", r[1], want, r[0])
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if n := nice(); n != r[0] {
		t.Fatalf("another thread's nice changed: %d, was %d", n, r[0])
	}
}
