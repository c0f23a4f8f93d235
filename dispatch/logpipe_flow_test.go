package dispatch

import (
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
)

func TestLogFlow(t *testing.T) {
	ld := func(task string, attempt int32, off, n int) *pb.LogData {
		return &pb.LogData{TaskId: task, Attempt: attempt, Offset: uint64(off), Data: make([]byte, n)}
	}
	var f logFlow
	if f.drop(ld("a", 1, 0, 10)) {
		t.Fatal("dropped with nothing refused")
	}
	f.acked("a", 1, 10)
	f.busy(ld("a", 1, 10, 10))
	// The continuation is dropped, frame after frame; other runs are not.
	for _, off := range []int{20, 30, 40} {
		if !f.drop(ld("a", 1, off, 10)) {
			t.Fatalf("frame at %d behind the busy one taken", off)
		}
	}
	if f.drop(ld("b", 1, 20, 10)) {
		t.Fatal("another run's frame dropped")
	}
	// The resend from the busy offset ends the dropping.
	if f.drop(ld("a", 1, 10, 10)) || f.drop(ld("a", 1, 20, 10)) || f.refused.Load() != 0 {
		t.Fatal("resend dropped")
	}

	// A frame out of the sequence (the worker resends from elsewhere) is taken.
	f.busy(ld("a", 1, 20, 10))
	if f.drop(ld("a", 1, 50, 10)) {
		t.Fatal("a frame out of the refused sequence dropped")
	}

	// An ack past the refused offset (the file had those bytes) ends it:
	// the worker goes on from there.
	f.busy(ld("a", 1, 60, 10))
	f.acked("a", 1, 80)
	if f.drop(ld("a", 1, 70, 10)) {
		t.Fatal("dropped after an ack past the refusal")
	}
	// ...also when that ack came before the refusal.
	f.busy(ld("a", 1, 70, 10))
	if f.drop(ld("a", 1, 80, 10)) {
		t.Fatal("dropped behind a refusal of bytes already acked")
	}
	// A new attempt starts afresh.
	f.busy(ld("a", 2, 0, 10))
	if f.drop(ld("a", 1, 10, 10)) {
		t.Fatal("the old attempt's frame dropped")
	}
	if f.refused.Load() != 0 {
		t.Fatalf("refused count %d", f.refused.Load())
	}
}
