package chaos

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// runScript is the program of every run (python3 -c runScript HISTORY
// SOCKET [SECONDS [silent-first]], no shell). It connects to the test's history socket first and
// says who it is (the test sees the connection end when the process dies,
// however it dies),
// then appends one line per event to the shared history file: "start",
// one "line" per output line, "end". Each line is one write(2) on an
// O_APPEND descriptor, so lines of concurrent runs never interleave:
//
//	<kind> <run> <attempt> <nonce> <worker> <ppid> <CUDA_VISIBLE_DEVICES> <unix ns>
//
// The nonce (pid.random) tells two executions of one attempt apart. Its
// output is a function of the run id alone (see expectedOutput): every
// attempt prints the same lines, a few of them to stderr, over 1–16 s (or
// SECONDS), then it exits 0; with silent-first, attempt 1 prints nothing
// and sleeps until it is killed.
const runScript = `import hashlib, os, socket, sys, time
hist, sock = sys.argv[1], sys.argv[2]
tid, att = os.environ["RLSCHED_TASK_ID"], os.environ["RLSCHED_ATTEMPT"]
nonce = "%d.%s" % (os.getpid(), os.urandom(4).hex())
who = "%s %s %d %s" % (nonce, os.environ.get("CHAOS_WORKER") or "-", os.getppid(),
                       os.environ.get("CUDA_VISIBLE_DEVICES") or "-")
fd = os.open(hist, os.O_WRONLY | os.O_APPEND)
def note(kind):
    os.write(fd, ("%s %s %s %s %d\n" % (kind, tid, att, who, time.time_ns())).encode())
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sock)
    s.sendall(("%s %s %s\n" % (tid, att, who)).encode())
except OSError:
    note("nosock")
note("start")
if att == "1" and sys.argv[4:5] == ["silent-first"]:
    time.sleep(600)  # prints nothing until it is killed
h = hashlib.sha256(tid.encode()).digest()
n = 10 + h[0] % 31
pause = (float(sys.argv[3]) if len(sys.argv) > 3 else 1 + (h[1] % 150) / 10) / n
for i in range(n):
    out = sys.stderr if i % 7 == 3 else sys.stdout
    out.write("%s %d %s\n" % (tid, i, hashlib.sha256(("%s:%d" % (tid, i)).encode()).hexdigest()))
    out.flush()
    note("line")
    time.sleep(pause)
note("end")
`

// expectedOutput is what runScript prints for run id, byte for byte.
func expectedOutput(id string) []byte {
	h := sha256.Sum256([]byte(id))
	n := 10 + int(h[0])%31
	var b bytes.Buffer
	for i := range n {
		l := sha256.Sum256([]byte(id + ":" + strconv.Itoa(i)))
		fmt.Fprintf(&b, "%s %d %s\n", id, i, hex.EncodeToString(l[:]))
	}
	return b.Bytes()
}

// execution is one process of one attempt of one run, as its history
// lines and its history-socket connection tell. Times are Unix ns of this
// machine's one wall clock.
type execution struct {
	run     string
	attempt int
	nonce   string
	pid     int
	worker  string // CHAOS_WORKER of its worker, or resolved from ppid
	ppid    int
	cuda    string // CUDA_VISIBLE_DEVICES, "" for none
	start   int64  // its first act: the socket connection or the start line
	last    int64  // its last line: it was alive then (a lower bound of its end)
	ended   bool   // it wrote "end": it ran to completion
	exit    int64  // when its socket connection closed: it was dead then (an upper bound of its end); 0: unknown
	alive   bool   // its connection is still open
	nosock  bool   // it could not reach the socket
}

// end is the latest time it may have been alive: its exit when known,
// else its last line.
func (e *execution) end() int64 {
	if e.exit != 0 {
		return e.exit
	}
	return e.last
}

func (e *execution) String() string {
	return fmt.Sprintf("run %s attempt %d (pid %d on %s, GPUs %q, %s)", e.run, e.attempt, e.pid, orDash(e.worker),
		e.cuda, time.Unix(0, e.start).UTC().Format("15:04:05.000"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sockRecord is what the socket tells of one execution.
type sockRecord struct {
	run     string
	attempt int
	nonce   string
	worker  string // "" when the run did not see CHAOS_WORKER
	ppid    int
	opened  int64
	closed  int64 // 0 while open
}

// history is the shared history file and the socket runs connect to. Both
// live in a directory every uid may write (01777), because a worker running
// as root starts each run under a uid of its own.
type history struct {
	path, sock string
	ln         *net.UnixListener

	mu      sync.Mutex
	records map[string]*sockRecord // by nonce
	conns   map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

func newHistory(t testing.TB, dir string) *history {
	t.Helper()
	h := &history{path: filepath.Join(dir, "history.txt"), sock: filepath.Join(dir, "h.sock"),
		records: map[string]*sockRecord{}, conns: map[net.Conn]struct{}{}}
	f, err := os.OpenFile(h.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
	if err != nil {
		t.Fatalf("cannot create the history file: %v", err)
	}
	f.Close()
	if err := os.Chmod(h.path, 0o666); err != nil { // past the umask
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: h.sock, Net: "unix"})
	if err != nil {
		t.Fatalf("cannot listen on the history socket: %v", err)
	}
	if err := os.Chmod(h.sock, 0o777); err != nil {
		t.Fatal(err)
	}
	h.ln = ln
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(h.close)
	return h
}

func (h *history) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		opened := time.Now().UnixNano()
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			c.Close()
			return
		}
		h.conns[c] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go h.serve(c, opened)
	}
}

// serve reads the hello line, then waits for the end of the connection:
// the process exited (or closed it, which the script never does).
func (h *history) serve(c net.Conn, opened int64) {
	defer h.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	var rec *sockRecord
	if err == nil {
		f := strings.Fields(line) // run attempt nonce worker ppid cuda
		if len(f) == 6 {
			a, _ := strconv.Atoi(f[1])
			ppid, _ := strconv.Atoi(f[4])
			rec = &sockRecord{run: f[0], attempt: a, nonce: f[2], worker: f[3], ppid: ppid, opened: opened}
			if rec.worker == "-" {
				rec.worker = ""
			}
			h.mu.Lock()
			h.records[rec.nonce] = rec
			h.mu.Unlock()
		}
	}
	var buf [64]byte
	for err == nil {
		_, err = br.Read(buf[:])
	}
	closed := time.Now().UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, c)
	if rec != nil && !errors.Is(err, net.ErrClosed) && !h.closed {
		rec.closed = closed
	}
}

// live returns the executions whose connection is open, by run.
func (h *history) live() map[string][]sockRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]sockRecord{}
	for _, r := range h.records {
		if r.closed == 0 {
			out[r.run] = append(out[r.run], *r)
		}
	}
	return out
}

// snapshot copies every socket record.
func (h *history) snapshot() map[string]sockRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]sockRecord, len(h.records))
	for k, r := range h.records {
		out[k] = *r
	}
	return out
}

func (h *history) close() {
	h.mu.Lock()
	h.closed = true
	for c := range h.conns {
		c.Close()
	}
	h.mu.Unlock()
	_ = h.ln.Close()
	h.wg.Wait()
}

// executions merges the history file with the socket records. Lines that
// do not parse are returned as problems (a torn or foreign line would mean
// the history itself cannot be trusted).
func (h *history) executions(workerOfPid func(int) string) ([]*execution, []string) {
	data, err := os.ReadFile(h.path)
	if err != nil {
		return nil, []string{fmt.Sprintf("cannot read the history file: %v", err)}
	}
	return mergeHistory(data, h.snapshot(), workerOfPid)
}

// mergeHistory is executions' pure part (unit-tested on its own).
func mergeHistory(data []byte, socks map[string]sockRecord, workerOfPid func(int) string) ([]*execution, []string) {
	byNonce := map[string]*execution{}
	var problems []string
	get := func(run string, attempt int, nonce string) *execution {
		e := byNonce[nonce]
		if e == nil {
			e = &execution{run: run, attempt: attempt, nonce: nonce}
			if p, _, ok := strings.Cut(nonce, "."); ok {
				e.pid, _ = strconv.Atoi(p)
			}
			byNonce[nonce] = e
		}
		return e
	}
	for n, line := range strings.Split(string(data), "\n") {
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 8 {
			problems = append(problems, fmt.Sprintf("history line %d is malformed: %q", n+1, line))
			continue
		}
		attempt, err1 := strconv.Atoi(f[2])
		ppid, err2 := strconv.Atoi(f[5])
		ns, err3 := strconv.ParseInt(f[7], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			problems = append(problems, fmt.Sprintf("history line %d is malformed: %q", n+1, line))
			continue
		}
		e := get(f[1], attempt, f[3])
		if e.run != f[1] || e.attempt != attempt {
			problems = append(problems, fmt.Sprintf("history line %d: nonce %s of run %s attempt %d reused", n+1, f[3], e.run, e.attempt))
			continue
		}
		if f[4] != "-" {
			e.worker = f[4]
		}
		e.ppid = ppid
		if f[6] != "-" {
			e.cuda = f[6]
		}
		switch f[0] {
		case "start":
			if e.start == 0 || ns < e.start {
				e.start = ns
			}
		case "end":
			e.ended = true
		case "nosock":
			e.nosock = true
		case "line":
		default:
			problems = append(problems, fmt.Sprintf("history line %d has an unknown kind: %q", n+1, line))
		}
		e.last = max(e.last, ns)
		if e.start == 0 {
			e.start = ns
		}
	}
	for nonce, r := range socks {
		e := get(r.run, r.attempt, nonce)
		if e.run != r.run || e.attempt != r.attempt {
			problems = append(problems, fmt.Sprintf("socket hello of nonce %s names run %s attempt %d, its lines %s attempt %d",
				nonce, r.run, r.attempt, e.run, e.attempt))
			continue
		}
		if e.start == 0 || r.opened < e.start {
			e.start = r.opened
		}
		e.last = max(e.last, r.opened)
		e.exit = r.closed
		e.alive = r.closed == 0
	}
	out := make([]*execution, 0, len(byNonce))
	for _, e := range byNonce {
		if e.worker == "" && workerOfPid != nil {
			e.worker = workerOfPid(e.ppid)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].start != out[j].start {
			return out[i].start < out[j].start
		}
		return out[i].nonce < out[j].nonce
	})
	return out, problems
}
