package live

import (
	"errors"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// Topics of API.md's WebSocket.
const (
	TopicTasks      = "/topic/tasks"
	TopicWorkers    = "/topic/workers"
	TopicLogsPrefix = "/topic/logs/"
)

// TopicKind tells the three kinds of topic apart.
type TopicKind int

const (
	TopicKindTasks TopicKind = iota + 1
	TopicKindWorkers
	TopicKindLogs
)

// ErrBadTopic is returned for a topic name that is not one of API.md's.
var ErrBadTopic = errors.New("malformed topic: use /topic/tasks, /topic/workers or /topic/logs/<taskId>")

// maxTopicLen bounds a topic name; the longest valid one is a log topic with
// a 64-character id.
const maxTopicLen = len(TopicLogsPrefix) + 64

// ParseTopic checks a topic name and returns its kind and, for a log topic,
// the run id, validated with core.ValidTaskID so it is safe as a file name.
func ParseTopic(topic string) (TopicKind, string, error) {
	switch {
	case len(topic) > maxTopicLen:
		return 0, "", ErrBadTopic
	case topic == TopicTasks:
		return TopicKindTasks, "", nil
	case topic == TopicWorkers:
		return TopicKindWorkers, "", nil
	case strings.HasPrefix(topic, TopicLogsPrefix):
		id := topic[len(TopicLogsPrefix):]
		if !core.ValidTaskID(id) {
			return 0, "", ErrBadTopic
		}
		return TopicKindLogs, id, nil
	}
	return 0, "", ErrBadTopic
}

// LogTopic is the topic of a run's log; id must be valid.
func LogTopic(taskID string) string { return TopicLogsPrefix + taskID }
