package worker

import (
	"bufio"
	"crypto/rand"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// impostor listens where the worker's master should be and does not know
// the worker's key: it sends a Challenge, reads the Hello (without being
// able to check it), and answers with answer's bytes: a HelloAck and an
// ExecuteTask, sealed however answer manages. It records every Hello.
type impostor struct {
	ln     net.Listener
	mu     sync.Mutex
	hellos []*pb.Hello
}

func newImpostor(t *testing.T, answer func(nm []byte, hello *pb.Hello) []byte) *impostor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	im := &impostor{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				nm := make([]byte, codec.NonceSize)
				rand.Read(nm)
				ch, _ := codec.AppendFrame(nil, &pb.Challenge{Nonce: nm, MasterId: "m1"})
				if _, err := c.Write(ch); err != nil {
					return
				}
				frame, h, err := codec.ReadRaw(bufio.NewReader(c), codec.DefaultMaxBody, nil)
				if err != nil || h.Type != codec.TypeHello || !h.Sealed {
					return
				}
				hello := &pb.Hello{}
				if proto.Unmarshal(frame[codec.HeaderSize:len(frame)-codec.TagSize], hello) != nil {
					return
				}
				im.mu.Lock()
				im.hellos = append(im.hellos, hello)
				im.mu.Unlock()
				_, _ = c.Write(answer(nm, hello))
				// Hold the connection until the worker gives up on it.
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	return im
}

func (im *impostor) seen() []*pb.Hello {
	im.mu.Lock()
	defer im.mu.Unlock()
	return append([]*pb.Hello(nil), im.hellos...)
}

// touchTask is a run that leaves a mark when it runs.
func touchTask(id, mark string) *pb.ExecuteTask {
	return &pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 7, Argv: []string{"touch", mark}}
}

// sealedAs seals a HelloAck and an ExecuteTask in the session that key
// would give, for the Hello the impostor read.
func sealedAs(t *testing.T, key []byte, task *pb.ExecuteTask) func([]byte, *pb.Hello) []byte {
	return func(nm []byte, h *pb.Hello) []byte {
		s, err := codec.MasterSession(key, nm, h.GetNonce(), h.GetWorkerId(), "m1")
		if err != nil {
			t.Error(err)
			return nil
		}
		out, _ := s.Send.AppendFrame(nil, &pb.HelloAck{Session: "s", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000, MasterId: "m1"})
		out, _ = s.Send.AppendFrame(out, task)
		return out
	}
}

// A fake master that cannot seal its HelloAck with the worker's key, be
// it unsealed, sealed with a key of another join token or with another
// worker's key, gets nothing run: the worker logs that the master failed to
// prove it knows its key, and tries again; it held no run when it came back
// (the next Hello lists none) and the run left no mark. The same
// ExecuteTask from the real master runs, so the mark can be made.
func TestFakeMasterGetsNothingRun(t *testing.T) {
	unsealed := func(task *pb.ExecuteTask) func([]byte, *pb.Hello) []byte {
		return func([]byte, *pb.Hello) []byte {
			out, _ := codec.AppendFrame(nil, &pb.HelloAck{Session: "s", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000, MasterId: "m1"})
			out, _ = codec.AppendFrame(out, task)
			return out
		}
	}
	cases := []struct {
		name   string
		answer func(*pb.ExecuteTask) func([]byte, *pb.Hello) []byte
	}{
		{"unsealed", unsealed},
		{"another token's key", func(task *pb.ExecuteTask) func([]byte, *pb.Hello) []byte {
			return sealedAs(t, codec.WorkerKey([]byte("a-guessed-join-token"), "w1"), task)
		}},
		{"another worker's key", func(task *pb.ExecuteTask) func([]byte, *pb.Hello) []byte {
			return sealedAs(t, codec.WorkerKey([]byte(testToken), "w2"), task)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "ran")
			im := newImpostor(t, tc.answer(touchTask("t-fake", mark)))
			var logs testutil.SyncBuffer
			startWorker(t, nil, loggingTo(t, &logs, func(c *Config) { c.Masters = []string{im.ln.Addr().String()} }))
			waitFor(t, 20*time.Second, "the worker's second Hello", func() bool { return len(im.seen()) >= 2 })
			if again := im.seen()[1]; len(again.GetRuns()) != 0 {
				t.Fatalf("the worker came back holding %v: it obeyed the fake master", again.GetRuns())
			}
			if _, err := os.Stat(mark); !os.IsNotExist(err) {
				t.Fatalf("the fake master's run ran (%v)", err)
			}
			want := "master at " + im.ln.Addr().String() + " failed to prove it knows this worker's key"
			if !strings.Contains(logs.String(), want) {
				t.Fatalf("the worker did not log %q:\n%s", want, logs.String())
			}
		})
	}

	t.Run("control", func(t *testing.T) {
		mark := filepath.Join(t.TempDir(), "ran")
		m := newFakeMaster(t, testToken)
		startWorker(t, m, func(c *Config) { c.RunAs = RunAsNone })
		mc := m.next(t)
		if err := mc.send(touchTask("t-real", mark)); err != nil {
			t.Fatal(err)
		}
		mc.started(t, "t-real")
		waitFor(t, 10*time.Second, "the real master's run to leave its mark", func() bool {
			_, err := os.Stat(mark)
			return err == nil
		})
	})
}

// After a genuine handshake, an unsealed ExecuteTask slipped into the
// stream (by anyone on the path) closes the connection, unobeyed.
func TestInjectedFrameIsNotObeyed(t *testing.T) {
	m := newFakeMaster(t, testToken)
	var logs testutil.SyncBuffer
	startWorker(t, m, loggingTo(t, &logs, nil))
	mc := m.next(t)
	mark := filepath.Join(t.TempDir(), "ran")
	frame, _ := codec.AppendFrame(nil, touchTask("t-injected", mark))
	mc.wmu.Lock()
	_, err := mc.c.Write(frame)
	mc.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	again := m.next(t) // the worker dropped the connection and came back
	if len(again.hello.GetRuns()) != 0 {
		t.Fatalf("the worker came back holding %v", again.hello.GetRuns())
	}
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatalf("the injected run ran (%v)", err)
	}
	if !strings.Contains(logs.String(), "is not authenticated, so it is not obeyed") {
		t.Fatalf("no logged reason:\n%s", logs.String())
	}
}

// loggingTo has the worker log into logs as well as the test's log, run its
// runs under its own uid (touch needs nothing else), and applies edit.
func loggingTo(t *testing.T, logs *testutil.SyncBuffer, edit func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Logger = zerolog.New(io.MultiWriter(logs, zerolog.ConsoleWriter{Out: &testLog{t: t}, NoColor: true})).With().Timestamp().Logger()
		c.RunAs = RunAsNone
		if edit != nil {
			edit(c)
		}
	}
}
