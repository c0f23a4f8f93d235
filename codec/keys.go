package codec

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/rlsched/rlsched/codec/pb"
)

// Keys. A worker's key is K_w = HMAC-SHA256(join token, "rlsched worker key
// v1\0" || worker_id): the master derives it for every Hello, and a worker
// holds either the join token or only its own key (`rlsched worker-key`), so
// a leaked key lets its holder be that one worker and no other. Each
// connection derives its session key from K_w and both sides' nonces:
//
//	S    = HMAC-SHA256(K_w, "rlsched session v1\0" || Nm || Nw || worker_id || "\0" || master_id)
//	k_wm = HMAC-SHA256(S, "worker to master")
//	k_mw = HMAC-SHA256(S, "master to worker")
//
// Nm is the master's Challenge nonce, Nw the worker's Hello nonce, both
// fresh per connection: no frame of one connection verifies on another, and
// neither side can be made to reuse a key by the other alone. The zero
// bytes end the label and the worker id ([A-Za-z0-9_-], never a zero), so
// two different (worker id, master id) pairs never feed the same bytes.

const (
	// NonceSize is the length of the Challenge's and the Hello's nonces.
	NonceSize = 16
	// MinJoinToken is the shortest join token accepted, in bytes.
	MinJoinToken = 16
	// WorkerKeySize is the length of a worker key (K_w), in bytes; its
	// text form is twice as many hex digits.
	WorkerKeySize = sha256.Size
)

// CheckJoinToken refuses a join token too short to be a secret.
func CheckJoinToken(token string) error {
	if token == "" {
		return errors.New("the join token is empty")
	}
	if len(token) < MinJoinToken {
		return fmt.Errorf("the join token is %d bytes long, shorter than %d: use a random token of at least %d bytes (openssl rand -hex 32)",
			len(token), MinJoinToken, MinJoinToken)
	}
	return nil
}

// WorkerKey returns K_w, the key of workerID under token.
func WorkerKey(token []byte, workerID string) []byte {
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte("rlsched worker key v1\x00"))
	mac.Write([]byte(workerID))
	return mac.Sum(nil)
}

// RunToken is the token of one attempt of a run placed on workerID under
// fence (ExecuteTask.run_token): a worker presents it to have the run
// adopted after a reconnect. It is derived from the join token, which a
// worker given only its own key does not hold, so every master computes
// it and none stores it, and another holder of that key cannot guess it
// as it could the sequential fence. Compare with CheckRunToken.
func RunToken(token []byte, workerID, taskID string, attempt int32, fence uint64) []byte {
	mac := hmac.New(sha256.New, token)
	mac.Write([]byte("rlsched run token v1\x00"))
	mac.Write([]byte(workerID))
	mac.Write([]byte{0})
	mac.Write([]byte(taskID))
	var n [12]byte
	binary.BigEndian.PutUint32(n[:4], uint32(attempt))
	binary.BigEndian.PutUint64(n[4:], fence)
	mac.Write(n[:])
	return mac.Sum(nil)[:RunTokenSize]
}

// RunTokenSize is the length of a RunToken.
const RunTokenSize = 16

// CheckRunToken reports, in constant time, whether got is the RunToken of
// (workerID, taskID, attempt, fence) under token.
func CheckRunToken(token []byte, workerID, taskID string, attempt int32, fence uint64, got []byte) bool {
	return hmac.Equal(got, RunToken(token, workerID, taskID, attempt, fence))
}

// ParseWorkerKey reads a worker key in the hex form `rlsched worker-key`
// prints.
func ParseWorkerKey(s string) ([]byte, error) {
	if len(s) != 2*WorkerKeySize {
		return nil, fmt.Errorf("a worker key is %d hex digits (as `rlsched worker-key ID` prints), not %d characters", 2*WorkerKeySize, len(s))
	}
	k, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("a worker key is %d hex digits (as `rlsched worker-key ID` prints): %w", 2*WorkerKeySize, err)
	}
	return k, nil
}

// Session is one side's sealing of a connection once the Hello is out:
// Send seals what it sends, Recv checks what it receives.
type Session struct {
	Send *Sealer
	Recv *Opener
}

// MasterSession is the master's side of a connection (sends k_mw, receives k_wm).
func MasterSession(kw, nm, nw []byte, workerID, masterID string) (Session, error) {
	wm, mw, err := sessionKeys(kw, nm, nw, workerID, masterID)
	return newSession(mw, wm), err
}

// WorkerSession is the worker's side of a connection (sends k_wm, receives k_mw).
func WorkerSession(kw, nm, nw []byte, workerID, masterID string) (Session, error) {
	wm, mw, err := sessionKeys(kw, nm, nw, workerID, masterID)
	return newSession(wm, mw), err
}

func newSession(send, recv []byte) Session {
	if send == nil {
		return Session{}
	}
	s := Session{Send: &Sealer{}, Recv: &Opener{}}
	s.Send.k.init(send)
	s.Recv.k.init(recv)
	return s
}

func sessionKeys(kw, nm, nw []byte, workerID, masterID string) (wm, mw []byte, err error) {
	if len(kw) != WorkerKeySize {
		return nil, nil, fmt.Errorf("BUG: a worker key of %d bytes", len(kw))
	}
	if len(nm) != NonceSize || len(nw) != NonceSize {
		return nil, nil, fmt.Errorf("nonces of %d and %d bytes, want %d each", len(nm), len(nw), NonceSize)
	}
	mac := hmac.New(sha256.New, kw)
	mac.Write([]byte("rlsched session v1\x00"))
	mac.Write(nm)
	mac.Write(nw)
	mac.Write([]byte(workerID))
	mac.Write([]byte{0})
	mac.Write([]byte(masterID))
	s := mac.Sum(nil)
	return derive(s, "worker to master"), derive(s, "master to worker"), nil
}

func derive(s []byte, label string) []byte {
	mac := hmac.New(sha256.New, s)
	mac.Write([]byte(label))
	return mac.Sum(nil)
}

// WorkerHello is the worker's half of the handshake: it gives h a fresh
// nonce, derives the session of key kw (K_w of h.WorkerId) for the master
// that sent ch, and appends h's frame, sealed as that session's first, to
// dst.
func WorkerHello(dst []byte, kw []byte, ch *pb.Challenge, h *pb.Hello) ([]byte, Session, error) {
	if len(ch.GetNonce()) != NonceSize {
		return dst, Session{}, fmt.Errorf("the master's Challenge has a nonce of %d bytes, want %d", len(ch.GetNonce()), NonceSize)
	}
	h.Nonce = make([]byte, NonceSize)
	if _, err := rand.Read(h.Nonce); err != nil {
		return dst, Session{}, fmt.Errorf("cannot make a nonce: %w", err)
	}
	s, err := WorkerSession(kw, ch.GetNonce(), h.Nonce, h.GetWorkerId(), ch.GetMasterId())
	if err != nil {
		return dst, Session{}, err
	}
	dst, err = s.Send.AppendFrame(dst, h)
	return dst, s, err
}

// AcceptHello is the master's half of the handshake. frame is the first
// whole frame of a connection (its header checked), nm the Challenge's
// nonce. It decodes the Hello, asks keyFor for the key of the worker id it
// names (keyFor refuses an id with an error), and checks the frame's tag
// under the session of that key: the Hello is returned, with the master's
// side of the session, only once the tag proves the worker holds the key.
func AcceptHello(frame, nm []byte, masterID string, keyFor func(workerID string) ([]byte, error)) (*pb.Hello, Session, error) {
	h, err := ParseHeader(frame, len(frame))
	if err != nil {
		return nil, Session{}, err
	}
	if h.Type != TypeHello || h.Size() != len(frame) {
		return nil, Session{}, fmt.Errorf("BUG: AcceptHello given a %s frame of %d bytes", h.Type, len(frame))
	}
	if !h.Sealed {
		return nil, Session{}, fmt.Errorf("%w: the Hello is not sealed: the worker runs an older rlsched than this master; upgrade it", ErrUnsealed)
	}
	m, err := DecodeBody(TypeHello, h.body(frame))
	if err != nil {
		return nil, Session{}, err
	}
	hello := m.(*pb.Hello)
	kw, err := keyFor(hello.GetWorkerId())
	if err != nil {
		return nil, Session{}, err
	}
	s, err := MasterSession(kw, nm, hello.GetNonce(), hello.GetWorkerId(), masterID)
	if err != nil {
		return nil, Session{}, fmt.Errorf("the Hello of worker %q: %w", hello.GetWorkerId(), err)
	}
	if err := s.Recv.Open(frame); err != nil {
		return nil, Session{}, fmt.Errorf("%w: the Hello of worker %q is not sealed with that worker's key for this connection (a wrong key, or a Hello replayed from another connection)",
			ErrTag, hello.GetWorkerId())
	}
	return hello, s, nil
}
