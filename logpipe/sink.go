package logpipe

import "github.com/rlsched/rlsched/core"

// LogSink receives the bytes appended to a run's log file, at their byte
// offset in that file (the offsets of API.md's /topic/logs), in file order.
// Implementations must not block: the WebSocket hub queues or drops
// (sending `lagged`) rather than stall a writer.
//
// A Writer calls it from its writer goroutines, after the bytes are written
// to the file and before they are acked, in file order for each run (the
// header and attempt markers included). data is never modified afterwards,
// so the sink may keep it without copying (read-only).
type LogSink interface {
	LogAppended(taskID string, fileOffset int64, data []byte)
}

// EventSink receives run and worker changes for live views (/topic/tasks,
// /topic/workers). Implementations must not block.
type EventSink interface {
	TaskChanged(t core.Task)
	WorkerChanged(w core.WorkerInfo)
}

// partsSink is a LogSink that takes the appended bytes in pieces and copies
// what it keeps (the Hub), so the writer need not join a batch's frames.
type partsSink interface {
	logAppendedParts(taskID string, fileOffset int64, parts [][]byte)
}
