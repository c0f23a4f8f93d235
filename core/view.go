package core

// EventSink receives run and worker changes for live views (/topic/tasks,
// /topic/workers): the live hub, and the cluster node that forwards them to
// the other masters. Implementations must not block.
type EventSink interface {
	TaskChanged(t Task)
	WorkerChanged(w WorkerInfo)
}
