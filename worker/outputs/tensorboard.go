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
	// maxQueuedMetrics and maxQueuedMetricBytes bound the Metric frames a
	// run holds for the writer (while disconnected); past them new ones are
	// dropped and counted.
	maxQueuedMetrics     = 10_000
	maxQueuedMetricBytes = 32 << 20
	// maxMetricFrameBytes bounds one Metric frame's values (estimated by
	// metricEntryBytes): a step with more tags than fit is split into
	// several frames of the same step, so no step can make a frame over the
	// protocol's limit (16 MiB) and cost its worker the connection.
	maxMetricFrameBytes = 1 << 20
	// maxTagBytes bounds a tag; a longer one is dropped and counted.
	maxTagBytes = 4096
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
		ls, err := o.dir.walk(maxEventFiles, isEventFile)
		if err != nil {
			return
		}
		for _, w := range ls.files {
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

// queuePoints turns points into Metric frames, one per step (or several
// for a step whose values do not fit one frame), in the order the steps
// came, and queues them for the writer within its bounds.
func (o *Files) queuePoints(pts []tfevents.Point) {
	var frames []*pb.Metric
	var sizes []int
	open := map[int64]int{} // step -> index of its frame still filling
	tooLong := 0
	for _, p := range pts {
		n := metricEntryBytes(p.Tag)
		if len(p.Tag) > maxTagBytes {
			tooLong++
			continue
		}
		i, ok := open[p.Step]
		if !ok || sizes[i]+n > maxMetricFrameBytes {
			i = len(frames)
			open[p.Step] = i
			frames = append(frames, &pb.Metric{TaskId: o.task, Attempt: o.attempt, Fence: o.fence, Step: p.Step, Values: map[string]float64{}})
			sizes = append(sizes, metricFrameOverhead)
		}
		if _, dup := frames[i].Values[p.Tag]; !dup {
			sizes[i] += n
		}
		frames[i].Values[p.Tag] = p.Value
		if ms := p.WallTime.UnixMilli(); !p.WallTime.IsZero() && ms > frames[i].TimeUnixMs {
			frames[i].TimeUnixMs = ms // the step's latest event
		}
	}
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	kept := 0
	for i, m := range frames {
		if len(o.metrics) >= maxQueuedMetrics || o.metricBytes+sizes[i] > maxQueuedMetricBytes {
			break
		}
		o.metrics = append(o.metrics, m)
		o.metricBytes += sizes[i]
		kept++
	}
	if lost := len(frames) - kept + tooLong; lost > 0 {
		if o.dropped == 0 {
			o.log.Warn().Int("tooLongTags", tooLong).
				Msg("TensorBoard points are read faster than they can be sent, or have tags over 4 KiB; dropping some")
		}
		o.dropped += lost
	}
	o.l.kick()
}

// metricFrameOverhead is a Metric frame's fields but its values, at most.
const metricFrameOverhead = 128

// metricEntryBytes is at least what one value of tag adds to a Metric
// frame's encoding: the map entry's tag and length, the key, the double.
func metricEntryBytes(tag string) int { return len(tag) + 16 }

// metricBytesOf is what m counted against maxQueuedMetricBytes.
func metricBytesOf(m *pb.Metric) int {
	n := metricFrameOverhead
	for k := range m.Values {
		n += metricEntryBytes(k)
	}
	return n
}
