package outputs

import (
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/worker/tfevents"
)

func newTestFiles() *Files {
	return &Files{l: NewLink(time.Second, backoff.Backoff{}, func() {}), task: "r1", attempt: 1, fence: 7, log: zerolog.Nop()}
}

// TestQueuePointsSplitsAStep (issue 25): a step with more tags than one
// frame holds (300,000 here: ~20 MiB, over the 16 MiB frame limit) becomes
// several frames of that step, each far under the limit, with every value;
// an over-long tag is dropped and counted.
func TestQueuePointsSplitsAStep(t *testing.T) {
	o := newTestFiles()
	const n = 300_000
	pts := make([]tfevents.Point, 0, n+2)
	for i := range n {
		pts = append(pts, tfevents.Point{Tag: fmt.Sprintf("layer%06d/some/long/scalar/name/of/a/big/model", i), Step: 5, Value: float64(i)})
	}
	pts = append(pts, tfevents.Point{Tag: "loss", Step: 6, Value: 1}, tfevents.Point{Tag: string(make([]byte, maxTagBytes+1)), Step: 6})
	o.queuePoints(pts)
	got := 0
	for _, m := range o.metrics {
		if size := proto.Size(m); size > 2*maxMetricFrameBytes {
			t.Fatalf("a frame of %d bytes", size)
		}
		if m.Step == 5 {
			got += len(m.Values)
		}
	}
	if got != n || len(o.metrics) < 10 {
		t.Fatalf("%d values of step 5 in %d frames, want %d in several", got, len(o.metrics), n)
	}
	if last := o.metrics[len(o.metrics)-1]; last.Step != 6 || len(last.Values) != 1 || o.dropped != 1 {
		t.Fatalf("the last frame %v, dropped %d: want step 6's loss alone and the long tag dropped", last.Values, o.dropped)
	}
}

// TestQueuePointsBoundedInBytes: the queue of a run that cannot send holds
// at most maxQueuedMetricBytes, counted as the frames it holds; the rest
// is dropped and counted.
func TestQueuePointsBoundedInBytes(t *testing.T) {
	o := newTestFiles()
	tag := string(make([]byte, 4000))
	for step := range int64(20) {
		pts := make([]tfevents.Point, 0, 1000)
		for i := range 1000 {
			pts = append(pts, tfevents.Point{Tag: fmt.Sprintf("%04d%s", i, tag[:3990]), Step: step})
		}
		o.queuePoints(pts)
	}
	if o.metricBytes > maxQueuedMetricBytes || o.dropped == 0 {
		t.Fatalf("held %d bytes (bound %d), dropped %d", o.metricBytes, maxQueuedMetricBytes, o.dropped)
	}
	held := 0
	for _, m := range o.metrics {
		held += metricBytesOf(m)
	}
	if held != o.metricBytes {
		t.Fatalf("the count says %d bytes, the frames hold %d", o.metricBytes, held)
	}
}

// TestQueuePointsCarryTheWallTime (issue 30): a step's frame carries the
// latest wall time of its events, in Unix ms; a step without one, 0.
func TestQueuePointsCarryTheWallTime(t *testing.T) {
	o := newTestFiles()
	at := time.UnixMilli(1_700_000_000_250)
	o.queuePoints([]tfevents.Point{
		{Tag: "loss", Step: 1, Value: 1, WallTime: at},
		{Tag: "reward", Step: 1, Value: 2, WallTime: at.Add(5 * time.Millisecond)},
		{Tag: "loss", Step: 2, Value: 3},
	})
	if len(o.metrics) != 2 || o.metrics[0].TimeUnixMs != 1_700_000_000_255 || o.metrics[1].TimeUnixMs != 0 {
		t.Fatalf("frames %v, want step 1 at 1700000000255 and step 2 without a time", o.metrics)
	}
}
