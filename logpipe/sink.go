package logpipe

// LogSink receives the bytes appended to a run's log file, at their byte
// offset in that file (the offsets of API.md's /topic/logs), in file order.
// Implementations must not block: the live hub queues or drops (sending
// `lagged`) rather than stall a writer.
//
// A Writer calls it from its writer goroutines, after the bytes are written
// to the file and before they are acked, in file order for each run (the
// header and attempt markers included). data is never modified afterwards,
// so the sink may keep it without copying (read-only).
type LogSink interface {
	LogAppended(taskID string, fileOffset int64, data []byte)
}

// PartsSink is a LogSink that also takes the appended bytes in pieces, so
// the writer need not join a batch's frames for it (the live hub, which
// copies what it keeps). parts is reused after the call; the byte slices in
// it are never modified.
type PartsSink interface {
	LogSink
	LogAppendedParts(taskID string, fileOffset int64, parts [][]byte)
}
