package live

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"unicode/utf8"

	"github.com/rlsched/rlsched/logpipe"
)

// A log subscription starts by catching up: one goroutine reads the run's
// file from the subscribed offset while live messages wait in the
// subscription's pending list. Whenever the first pending message starts at
// or before what was read, the pending messages are handed over (the part
// already sent is cut off by offset), and once the file has nothing more
// and nothing is pending the subscription goes live. Because a message is
// announced only after its bytes are in the file, the file always holds
// every byte before the first pending message: the switch never loses or
// repeats a byte. The reader waits for room in the queue instead of
// dropping, so a slow client slows its own history, nobody else.

// startCatchUpLocked starts the history reader of sub (not live).
func (s *Subscriber) startCatchUpLocked(sub *subscription) {
	s.catchups.Add(1)
	go s.catchUp(sub)
}

func (s *Subscriber) catchUp(sub *subscription) {
	defer s.catchups.Done()
	h := s.hub
	path, err := logpipe.Path(h.cfg.LogDir, sub.taskID)
	if err != nil {
		panic("BUG: a log subscription with an invalid run id: " + err.Error())
	}
	hf := &historyFile{path: path}
	defer hf.close()
	buf := make([]byte, h.cfg.HistoryChunk+utf8.UTFMax)
	half := h.cfg.QueueBytes / 2

	s.mu.Lock()
	for {
		for !sub.closed && s.queued >= half {
			s.drained.Wait()
		}
		if sub.closed {
			s.mu.Unlock()
			return
		}
		// Hand over the pending messages that continue the stream.
		for len(sub.pending) > 0 && s.queued < half {
			m := sub.pending[0]
			if m.off > sub.next {
				break
			}
			sub.pending[0] = nil
			sub.pending = sub.pending[1:]
			sub.pendingBytes -= len(m.raw)
			if m.end() > sub.next {
				s.pushLogLocked(sub, m, true)
			}
		}
		if len(sub.pending) > 0 && sub.pending[0].off <= sub.next {
			continue // no room: wait
		}
		limit := int64(-1)
		if len(sub.pending) > 0 {
			limit = sub.pending[0].off
		}
		next, ended := sub.next, sub.runEnded
		s.mu.Unlock()

		data, eof, err := hf.read(buf, next, limit, h.cfg.HistoryChunk)
		n := 0
		if err == nil {
			n = historyCut(data, next, limit, eof, ended)
		}

		s.mu.Lock()
		if sub.closed {
			s.mu.Unlock()
			return
		}
		if n > 0 {
			// Only this goroutine moves next while the subscription is not live.
			frame := appendLogFrame(make([]byte, 0, n+len(sub.name)+96), sub.name, next, data[:n])
			s.pushSubLocked(sub, frame)
			sub.next = next + int64(n)
			h.history.Add(int64(n))
			continue
		}
		if len(sub.pending) == 0 {
			sub.live = true // caught up; from here deliverLog queues directly
			if h.onLive != nil {
				h.onLive(s, sub.name)
			}
			s.mu.Unlock()
			return
		}
		if first := sub.pending[0].off; first > sub.next && first == limit {
			// The hub was told of bytes at limit but the file has nothing
			// before them (or cannot be read): skip to them, telling the
			// client (it may fetch the gap over REST).
			s.dropLocked(sub)
			sub.next = limit
		}
	}
}

// historyCut returns how many of data, bytes of the file read at next, to
// send now. limit (-1: none) is where the first pending message starts; eof
// says the read reached the end of the file; ended that the run will not
// write more. No message ends inside a UTF-8 character that more bytes
// could complete: at a limit the character is completed from the file
// (the pending message is cut after it), elsewhere it waits for the next
// read, unless the run has ended.
func historyCut(data []byte, next, limit int64, eof, ended bool) int {
	if limit >= 0 && next+int64(len(data)) > limit {
		l := int(limit - next)
		k := utf8Cut(data[:l])
		if k == l {
			return l
		}
		if utf8.FullRune(data[k:]) {
			_, size := utf8.DecodeRune(data[k:])
			return k + size
		}
		return l
	}
	if eof && ended {
		return len(data)
	}
	return utf8Cut(data)
}

// historyFile reads a run's log file, opened on first use (a run that has
// not started has none yet).
type historyFile struct {
	path string
	f    *os.File
}

// read reads at off up to a chunk, or up to limit plus the rest of a
// character that straddles it; eof says the file ended before the buffer.
func (hf *historyFile) read(buf []byte, off, limit int64, chunk int) ([]byte, bool, error) {
	want := int64(chunk)
	if limit >= 0 {
		want = min(want, limit-off+utf8.UTFMax-1)
	}
	if want <= 0 {
		return nil, false, nil
	}
	if hf.f == nil {
		f, err := os.Open(hf.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		hf.f = f
	}
	n, err := hf.f.ReadAt(buf[:want], off)
	if errors.Is(err, io.EOF) {
		return buf[:n], true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return buf[:n], false, nil
}

func (hf *historyFile) close() {
	if hf.f != nil {
		_ = hf.f.Close()
	}
}
