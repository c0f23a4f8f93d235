package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fasthttp/websocket"

	"github.com/rlsched/rlsched/bench/fleet"
	"github.com/rlsched/rlsched/bench/internal/hist"
)

// logSubs are WebSocket clients of /ws, one per run, each subscribed to
// /topic/logs/<id> (API.md). Every line the simulated workers stream starts
// with the time it was first written to the socket (fleet.LineTime), so the
// reader's clock minus it is the worker-to-browser latency, on one machine's
// wall clock.
type logSubs struct {
	conns                          []*websocket.Conn
	lines, frames, lagged, refused atomic.Int64
	lat                            atomic.Pointer[hist.Hist]
	since                          atomic.Int64 // lines written before this (unix nanos) are counted, not timed
	wg                             sync.WaitGroup
	firstErr                       atomic.Value
}

type subFrame struct {
	Type   string `json:"type"`
	Topic  string `json:"topic"`
	Offset int64  `json:"offset"`
	Data   string `json:"data"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// dialLogSubs connects one subscriber per id to url (ws://…/ws?token=…)
// and returns once every subscription is confirmed.
func dialLogSubs(url string, ids []string) (*logSubs, error) {
	s := &logSubs{}
	s.lat.Store(&hist.Hist{})
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 64 << 10}
	for _, id := range ids {
		c, resp, err := d.Dial(url, nil)
		if err != nil {
			s.close()
			if resp != nil {
				return nil, fmt.Errorf("cannot open a WebSocket to %s: %v (HTTP %d)", url, err, resp.StatusCode)
			}
			return nil, fmt.Errorf("cannot open a WebSocket to %s: %w", url, err)
		}
		s.conns = append(s.conns, c)
		topic := "/topic/logs/" + id
		if err := c.WriteJSON(map[string]any{"op": "subscribe", "topic": topic}); err != nil {
			s.close()
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			var f subFrame
			if err := c.ReadJSON(&f); err != nil {
				s.close()
				return nil, fmt.Errorf("no answer to subscribe %s: %w", topic, err)
			}
			if f.Type == "error" && f.Error != nil {
				s.close()
				return nil, fmt.Errorf("subscribe %s refused: %s: %s", topic, f.Error.Code, f.Error.Message)
			}
			if f.Type == "subscribed" && f.Topic == topic {
				break
			}
		}
		_ = c.SetReadDeadline(time.Time{})
	}
	for _, c := range s.conns {
		s.wg.Go(func() { s.read(c) })
	}
	return s, nil
}

func (s *logSubs) read(c *websocket.Conn) {
	var rest []byte // a line split across frames
	for {
		_, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		now := time.Now().UnixNano()
		var f subFrame
		data, fast := fastLogData(msg, rest)
		if fast {
			f.Type = "log"
		} else if err := json.Unmarshal(msg, &f); err != nil {
			s.firstErr.CompareAndSwap(nil, fmt.Sprintf("undecodable frame: %v", err))
			continue
		}
		switch f.Type {
		case "log":
			s.frames.Add(1)
			h, since := s.lat.Load(), s.since.Load()
			if !fast {
				data = append(rest, f.Data...)
			}
			n := int64(0)
			for {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					break
				}
				if ts, ok := fleet.LineTime(data[:i]); ok && ts >= since {
					h.Add(now - ts)
				}
				n++
				data = data[i+1:]
			}
			rest = append(rest[:0], data...)
			s.lines.Add(n)
		case "lagged":
			s.lagged.Add(1)
			rest = rest[:0]
		case "error":
			s.refused.Add(1)
			if f.Error != nil {
				s.firstErr.CompareAndSwap(nil, f.Error.Code+": "+f.Error.Message)
			}
		}
	}
}

// fastLogData decodes the data of a log frame, {"topic":…,"type":"log",
// "offset":N,"data":"…"}, appended to dst, when the text has no escapes but
// \n (the streamed lines have none): encoding/json would cost the harness
// more CPU than the master spends on the frame. ok is false for anything
// else, which then goes through encoding/json.
func fastLogData(msg, dst []byte) ([]byte, bool) {
	if !bytes.Contains(msg[:min(len(msg), 200)], []byte(`"type":"log"`)) {
		return dst, false
	}
	i := bytes.Index(msg, []byte(`"data":"`))
	if i < 0 {
		return dst, false
	}
	body := msg[i+len(`"data":"`):]
	end := len(dst)
	for {
		j := bytes.IndexAny(body, `\"`)
		if j < 0 {
			return dst[:end], false
		}
		dst = append(dst, body[:j]...)
		if body[j] == '"' {
			return dst, true
		}
		if j+1 >= len(body) || body[j+1] != 'n' {
			return dst[:end], false
		}
		dst = append(dst, '\n')
		body = body[j+2:]
	}
}

// begin starts a new measurement: a fresh histogram and zero counters;
// only lines written from now on are timed.
func (s *logSubs) begin() {
	s.since.Store(time.Now().UnixNano())
	s.lat.Store(&hist.Hist{})
	s.lines.Store(0)
	s.frames.Store(0)
	s.lagged.Store(0)
}

func (s *logSubs) close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.wg.Wait()
}
