package logpipe

// Totals are the writer's counters that the master's metrics report.
type Totals struct {
	Bytes  int64 // log bytes written since start (duplicates excluded)
	Busy   int64 // frames refused "busy" since start
	Queued int64 // frames queued now, not yet written
}

// Totals reads the counters; it allocates nothing (Stats builds a map).
// Safe from any goroutine.
func (w *Writer) Totals() Totals {
	t := Totals{Bytes: w.bytes.Load(), Busy: w.busy.Load()}
	for _, s := range w.shards {
		t.Queued += int64(s.q.depth())
	}
	return t
}
