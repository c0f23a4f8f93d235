package live

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/rlsched/rlsched/logpipe"
)

// With several masters and one shared LOG_DIR, a run's bytes are written by
// the master its worker is connected to; a subscriber of /topic/logs/<id>
// on another master would get the history from the file and then nothing.
// The poller closes that gap: every interval it looks at the log topics
// that have subscribers but got no bytes from this process's writer lately,
// and announces what the file gained since the last announcement, as the
// writer would have. Subscriptions take announcements by offset, so a byte
// announced both by the poller and by a (late) local write still reaches a
// client once; bytes the poller has not announced yet are read from the
// file by the subscription's catch-up, as after any gap.

// pollChunk bounds the bytes read from one file per poll.
const pollChunk = 1 << 20

func nanotime() int64 { return time.Now().UnixNano() }

// fileSize is the size of a run's log file now, 0 when it has none.
func (h *Hub) fileSize(taskID string) int64 {
	p, err := logpipe.Path(h.cfg.LogDir, taskID)
	if err != nil {
		return 0
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// PollFiles runs the poller until ctx ends; interval ≤ 0 means 200 ms. Only
// worth running when other processes write to LogDir.
func (h *Hub) PollFiles(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = 200 * time.Millisecond
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	buf := make([]byte, pollChunk)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h.pollOnce(2*interval, buf)
	}
}

// pollOnce announces file growth of every log topic quiet locally for
// longer than quiet.
func (h *Hub) pollOnce(quiet time.Duration, buf []byte) {
	now := nanotime()
	for i := range h.shards {
		sh := &h.shards[i]
		sh.mu.RLock()
		ids := make([]string, 0, len(sh.logs))
		for id, t := range sh.logs {
			if now-t.localAt.Load() > int64(quiet) {
				ids = append(ids, id)
			}
		}
		sh.mu.RUnlock()
		for _, id := range ids {
			h.pollTopic(sh, id, buf)
		}
	}
}

func (h *Hub) pollTopic(sh *hubShard, id string, buf []byte) {
	size := h.fileSize(id)
	sh.mu.RLock()
	defer sh.mu.RUnlock() // held while announcing: the topic stays
	t := sh.logs[id]
	if t == nil {
		return
	}
	t.mu.Lock()
	end := t.end
	t.mu.Unlock()
	if size <= end {
		return
	}
	p, err := logpipe.Path(h.cfg.LogDir, id)
	if err != nil {
		return
	}
	f, err := os.Open(p)
	if err != nil {
		return
	}
	defer f.Close()
	n, err := f.ReadAt(buf[:min(int64(len(buf)), size-end)], end)
	if n == 0 || (err != nil && err != io.EOF) {
		return
	}
	t.publishLog(h, end, [][]byte{buf[:n]}, false) // copies
}
