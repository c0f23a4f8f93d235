package outputs

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/tfevents"
)

// TensorBoard event files (events.out.tfevents.*) anywhere under a run's
// output dir are read as they grow (package tfevents), and every scalar
// becomes a Metric frame (one per step of a poll) that the writer sends
// after the run's logs. A poll runs every tbPoll, a look for new files
// every tbDiscover, and one last of both before the run's TaskFinished.
// Frames in flight when a connection drops are not sent again: the event
// file itself is uploaded with the other outputs.

const (
	tbPoll     = time.Second
	tbDiscover = 2 * time.Second
	// maxEventFiles bounds the event files of a run that are followed.
	maxEventFiles = 1000
	// maxQueuedMetrics bounds the Metric frames a run holds for the writer
	// (while disconnected); past it new ones are dropped and counted.
	maxQueuedMetrics = 10_000
	// maxMetricFrames bounds the Metric frames one writer pass takes of a run.
	maxMetricFrames = 256
)

func isEventFile(name string) bool { return strings.HasPrefix(name, "events.out.tfevents.") }

// followTensorBoard is the run's TensorBoard reader goroutine.
func (o *Files) followTensorBoard() {
	defer close(o.tbEnd)
	files := map[string]*tfevents.File{}
	given := map[string]bool{} // corrupt or unreadable: not followed again
	discover := func() {
		list, _, _, err := o.dir.walk(maxEventFiles, isEventFile)
		if err != nil {
			return
		}
		for _, w := range list {
			if rel := w.rel; files[rel] == nil && !given[rel] {
				files[rel] = tfevents.FollowWith(rel, func() (*os.File, error) { return o.dir.open(rel) })
			}
		}
	}
	poll := func() {
		for rel, f := range files {
			pts, err := f.Poll()
			if len(pts) > 0 {
				o.queuePoints(pts)
			}
			if err != nil {
				var ce *tfevents.CorruptError
				if errors.As(err, &ce) {
					o.log.Warn().Str("path", rel).Err(err).Msg("an event file is corrupt; its later records are not read")
				} else {
					o.log.Info().Str("path", rel).Err(err).Msg("not reading an event file")
				}
				given[rel] = true
				delete(files, rel)
			}
		}
	}
	discover()
	pt := time.NewTicker(tbPoll)
	defer pt.Stop()
	dt := time.NewTicker(tbDiscover)
	defer dt.Stop()
	for {
		select {
		case <-o.quit:
			return
		case <-o.final:
			discover()
			poll()
			return
		case <-pt.C:
			poll()
		case <-dt.C:
			discover()
		}
	}
}

// queuePoints turns points into Metric frames, one per step, in the order
// the steps came, and queues them for the writer.
func (o *Files) queuePoints(pts []tfevents.Point) {
	var frames []*pb.Metric
	byStep := map[int64]*pb.Metric{}
	for _, p := range pts {
		m := byStep[p.Step]
		if m == nil {
			m = &pb.Metric{TaskId: o.task, Attempt: o.attempt, Fence: o.fence, Step: p.Step, Values: map[string]float64{}}
			byStep[p.Step] = m
			frames = append(frames, m)
		}
		m.Values[p.Tag] = p.Value
	}
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	if room := maxQueuedMetrics - len(o.metrics); len(frames) > room {
		if o.dropped == 0 {
			o.log.Warn().Msg("TensorBoard points are read faster than they can be sent; dropping some")
		}
		o.dropped += len(frames) - max(room, 0)
		frames = frames[:max(room, 0)]
	}
	o.metrics = append(o.metrics, frames...)
	o.l.kick()
}
