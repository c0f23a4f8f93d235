package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/rig"
)

func header(magic uint16, version uint8, typ codec.Type, length uint32) []byte {
	h := make([]byte, codec.HeaderSize)
	binary.BigEndian.PutUint16(h, magic)
	h[2], h[3] = version, byte(typ)
	binary.BigEndian.PutUint32(h[4:], length)
	return h
}

// readFrame reads one frame's header and body from c.
func readFrame(c net.Conn) (codec.Type, []byte, error) {
	h := make([]byte, codec.HeaderSize)
	if _, err := io.ReadFull(c, h); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[4:])
	if binary.BigEndian.Uint16(h) != codec.Magic || n > 1<<20 {
		return 0, nil, fmt.Errorf("unexpected header % X", h)
	}
	body := make([]byte, n)
	_, err := io.ReadFull(c, body)
	return codec.Type(h[3]), body, err
}

// sendBad dials the master's RPC port, reads its Challenge, sends payload
// and expects the master to close the connection (after an optional
// Goodbye). It returns the local address (the master logs it as "remote")
// and the Goodbye's reason.
func sendBad(t *testing.T, rpc string, payload []byte) (local, goodbye string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", rpc, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	typ, _, err := readFrame(c)
	if err != nil || typ != codec.TypeChallenge {
		t.Fatalf("first frame from the master: type %v, err %v; want a Challenge", typ, err)
	}
	if _, err := c.Write(payload); err != nil {
		t.Fatalf("cannot send: %v", err)
	}
	for {
		typ, body, err := readFrame(c)
		if err != nil {
			var ne net.Error
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
				return c.LocalAddr().String(), goodbye // closed by the master
			case errors.As(err, &ne) && ne.Timeout():
				t.Fatalf("the master kept the connection open after % X…", payload[:min(len(payload), 16)])
			default:
				t.Fatalf("reading after a bad frame: %v", err)
			}
		}
		if typ != codec.TypeGoodbye {
			t.Fatalf("the master answered a bad frame with %v", typ)
		}
		m, err := codec.DecodeBody(typ, body)
		if err != nil {
			t.Fatalf("undecodable Goodbye: %v", err)
		}
		goodbye = m.(*pb.Goodbye).GetReason()
	}
}

// TestBadWorkersRefused: a worker with the wrong join token and raw clients
// speaking garbage are refused with a logged reason, and the master keeps
// serving good workers and runs.
func TestBadWorkersRefused(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: b.Dir + "/data"})

	// A worker with the wrong join token.
	bad := b.StartWorker("worker-intruder", m.RPC, rig.WorkerOpts{ID: "intruder", Token: "not-the-join-token"})
	l := m.WaitLog(t, 20*time.Second, "the refusal of the intruder", func(l logLine) bool {
		return strings.HasPrefix(l.Msg(), "closing connection:") && strings.Contains(l.Str("error"), "intruder")
	})
	if !strings.Contains(l.Msg(), "worker refused") || !strings.Contains(l.Str("error"), "join token") {
		t.Errorf("refusal logged as %v; want 'worker refused' and a reason naming the join token", l)
	}
	bad.WaitLog(t, 10*time.Second, "that it was refused", func(l logLine) bool {
		return strings.Contains(l.Msg(), "refused")
	})
	bad.Kill(t)

	// Raw clients.
	cases := []struct {
		name    string
		payload []byte
		reason  string // in the master's log message
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "bad frame header"},
		{"huge length", header(codec.Magic, codec.Version, codec.TypeHello, 0xFFFFFFFF), "bad frame header"},
		{"undecodable Hello", append(header(codec.Magic, codec.Version, codec.TypeHello|codec.FlagSealed, 3+codec.TagSize), make([]byte, 3+codec.TagSize)...), "bad frame body"},
		{"unsealed Hello", append(header(codec.Magic, codec.Version, codec.TypeHello, 4), 0x0A, 0x02, 'w', '1'), "worker refused"},
		{"wrong version", header(codec.Magic, 2, codec.TypeHello, 0), "bad frame header"},
		{"unknown type", header(codec.Magic, codec.Version, 0xEE, 0), "bad frame header"},
		{"heartbeat before Hello", header(codec.Magic, codec.Version, codec.TypeHeartbeat, 0), "protocol error"},
		{"empty Hello", header(codec.Magic, codec.Version, codec.TypeHello, 0), "worker refused"},
	}
	for _, tc := range cases {
		local, goodbye := sendBad(t, m.RPC, tc.payload)
		l := m.WaitLog(t, 10*time.Second, "why it closed the "+tc.name+" connection", func(l logLine) bool {
			return l.Str("remote") == local && strings.HasPrefix(l.Msg(), "closing connection:")
		})
		if !strings.Contains(l.Msg(), tc.reason) || l.Str("error") == "" {
			t.Errorf("%s: master logged %v; want %q with an error", tc.name, l, tc.reason)
		}
		t.Logf("%s: closed; goodbye %q; logged %q: %s", tc.name, goodbye, l.Msg(), l.Str("error"))
	}

	// The master still serves: a good worker joins and a run succeeds.
	b.StartWorker("worker-good", m.RPC, rig.WorkerOpts{ID: "good"})
	m.WaitJoined(t, "good")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-c", "print('ok')"}})
	tk := alice.waitStatus(id, "SUCCEEDED", 30*time.Second)
	if tk.Worker != "good" {
		t.Errorf("run ran on %q, want good", tk.Worker)
	}
	var health struct {
		Status  string         `json:"status"`
		Workers map[string]int `json:"workers"`
	}
	r := newClient(t, m.URL).Must("GET", "/api/monitor/health", nil, 200, &health)
	if health.Status != "UP" || health.Workers["IDLE"]+health.Workers["RUNNING"] != 1 {
		t.Errorf("health: %s; want UP with one connected worker", r)
	}
	var ws struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	r = alice.Must("GET", "/api/workers", nil, 200, &ws)
	if len(ws.Items) != 1 || ws.Items[0].ID != "good" {
		t.Errorf("workers: %s; want only the good worker", r)
	}
	if m.Exited() {
		t.Fatalf("the master exited: %v", m.Err())
	}
}
