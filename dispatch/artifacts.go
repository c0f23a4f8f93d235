package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifactpipe"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// Run outputs on the RPC path: ArtifactChunks of uploads go from the event
// loop to the artifact receiver (package artifactpipe) after the fence and
// path checks; its answers go back as ArtifactAcks. The files a resumed
// attempt starts with are listed in its ExecuteTask and streamed to the
// worker on its ArtifactAck{restore} (the restorer, restorestream.go). TensorBoard points (Metric frames) go
// to the log pipe's metric queue.

// onArtifactChunk runs on the connection's event loop and never blocks:
// a chunk of a run the worker does not hold, with a bad path or a bad
// version, is refused and logged (thinned); the others are submitted, or
// answered "busy" when the receiver's queue is full.
func (d *Dispatcher) onArtifactChunk(sess *session, c *pb.ArtifactChunk) {
	ack := &pb.ArtifactAck{TaskId: c.TaskId, Attempt: c.Attempt, Path: c.Path, Offset: c.Offset, Size: c.Size, ModifiedUnixNs: c.ModifiedUnixNs}
	rr := sess.run(c.TaskId)
	if !rr.reports(sess.workerID, c.Attempt, c.Fence) || rr.rank > 0 { // a group's rank 0 keeps the run's outputs
		refuseOutput(&d.log, sess, c.TaskId, "refusing an ArtifactChunk with a stale fence", nil)
		ack.Error = "fenced"
		_ = sess.send(ack)
		return
	}
	var why error
	switch err := core.CheckArtifactPath(c.Path); {
	case err != nil:
		why = err
	case c.Restore:
		why = errors.New("a worker sends no restore chunks")
	case c.Size < 0 || len(c.Data) > artifactpipe.MaxChunk:
		why = fmt.Errorf("size %d, %d bytes of data", c.Size, len(c.Data))
	case d.outputs == nil:
		why = errors.New("this master keeps no outputs")
	}
	if why != nil {
		refuseOutput(&d.log, sess, c.TaskId, "refusing an ArtifactChunk", why)
		ack.Error = "refused: " + why.Error()
		_ = sess.send(ack)
		return
	}
	if !sess.outputSender {
		sess.outputSender = true
		d.outputs.AddSender(1)
	}
	ch := artifactpipe.Chunk{TaskID: c.TaskId, Attempt: int(c.Attempt), Path: c.Path, Size: c.Size, ModNs: c.ModifiedUnixNs,
		Offset: c.Offset, Data: c.Data, Last: c.Last, Changing: c.Changing, Ack: sess}
	if !d.outputs.Submit(ch) {
		ack.Error, ack.Window = artifactpipe.ErrBusy, d.outputs.Window()
		_ = sess.send(ack)
	}
}

// refuseOutput logs a refused output frame at the 1st, 2nd, 4th, 8th...
// refusal of the session, so a worker that keeps sending cannot flood the
// log from the loop.
func refuseOutput(log *zerolog.Logger, sess *session, taskID, msg string, err error) {
	if n := sess.refusedOutput.Add(1); n&(n-1) == 0 {
		log.Warn().Str("worker", sess.workerID).Str("task", taskID).AnErr("why", err).Int64("refused", n).Msg(msg)
	}
}

// ArtifactAcked sends the receiver's answer to the worker, with the
// connection's artifact window. Called by the receiver's writers; never
// blocks (AsyncWrite).
func (s *session) ArtifactAcked(a artifactpipe.Ack) {
	_ = s.send(&pb.ArtifactAck{TaskId: a.TaskID, Attempt: int32(a.Attempt), Path: a.Path, Offset: a.Offset, Error: a.Err,
		Done: a.Done, Size: a.Size, ModifiedUnixNs: a.ModNs, Window: s.d.outputs.Window()})
}

// onMetric takes the TensorBoard scalars a worker read from a run's event
// files: on the event loop, into the log pipe's metric queue (which never
// blocks on the store). Points of a run the worker does not hold are
// dropped.
func (d *Dispatcher) onMetric(sess *session, mt *pb.Metric) {
	if !sess.run(mt.TaskId).reports(sess.workerID, mt.Attempt, mt.Fence) {
		refuseOutput(&d.log, sess, mt.TaskId, "dropping a Metric with a stale fence", nil)
		return
	}
	pts := make([]core.MetricPoint, 0, len(mt.Values))
	for name, v := range mt.Values {
		if name == "" || len(name) > maxMetricName || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		pts = append(pts, core.MetricPoint{Step: mt.Step, Name: name, Value: v, Time: mt.TimeUnixMs})
	}
	if len(pts) > 0 {
		d.logs.QueueMetrics(mt.TaskId, pts)
	}
}

// maxMetricName is the longest metric name kept, as for metric lines.
const maxMetricName = 128

// warn records a warning on a run, off the caller's goroutine, logging a
// failure.
func (d *Dispatcher) warn(id, code, msg string) {
	go func() {
		ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
		defer cancel()
		if err := d.st.AddWarning(ctx, id, core.Warning{Code: code, Message: msg, At: d.now()}); err != nil {
			d.log.Warn().Str("task", id).Err(err).Str("warning", msg).Msg("cannot record a run's warning")
		}
	}()
}

// outputWindow is HelloAck.artifact_window: 0 (the worker's default)
// without a receiver.
func (d *Dispatcher) outputWindow() uint32 {
	if d.outputs == nil {
		return 0
	}
	return d.outputs.Window()
}
