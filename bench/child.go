package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/rlsched/rlsched/bench/fleet"
	"github.com/rlsched/rlsched/bench/internal/echo"
	"github.com/rlsched/rlsched/bench/naive"
	"github.com/rlsched/rlsched/store/sqlite"
)

// Helpers run as child processes of the harness (so their CPU and memory
// are their own): the harness writes a JSON config as the first line of the
// child's stdin, then JSON commands, one a line; the child answers each with
// one JSON line on stdout. EOF on stdin ends the child.

type command struct {
	Op      string        `json:"op"`
	Addr    string        `json:"addr,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	Rate    float64       `json:"rate,omitempty"` // stream: lines/s per run (0: as fast as the window allows) for Timeout
}

type answer struct {
	Error  string       `json:"error,omitempty"`
	Ready  bool         `json:"ready,omitempty"`
	Joined int64        `json:"joined,omitempty"`
	Stats  *fleet.Stats `json:"stats,omitempty"`
	Execs  []fleet.Exec `json:"execs,omitempty"`
}

// child is the harness's end of a helper process. call is safe for
// concurrent use (calls are serialised).
type child struct {
	role string
	cmd  *exec.Cmd
	in   io.WriteCloser
	dec  *json.Decoder
	mu   sync.Mutex
}

func (e *env) startChild(role string, cfg any) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-role", role)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp(e.tmp, role+"-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := e.start(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("cannot start %s helper: %w", role, err)
	}
	logf.Close()
	c := &child{role: role, cmd: cmd, in: in, dec: json.NewDecoder(bufio.NewReader(out))}
	b, _ := json.Marshal(cfg)
	if _, err := fmt.Fprintf(in, "%s\n", b); err != nil {
		return nil, fmt.Errorf("cannot configure %s helper: %w", role, err)
	}
	var a answer
	if err := c.dec.Decode(&a); err != nil || !a.Ready {
		tail, _ := os.ReadFile(logf.Name())
		return nil, fmt.Errorf("%s helper did not start: %v %s\n%s", role, err, a.Error, lastLines(tail, 10))
	}
	return c, nil
}

func (c *child) call(cmd command) (answer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, _ := json.Marshal(cmd)
	if _, err := fmt.Fprintf(c.in, "%s\n", b); err != nil {
		return answer{}, fmt.Errorf("%s helper: %w", c.role, err)
	}
	var a answer
	if err := c.dec.Decode(&a); err != nil {
		return a, fmt.Errorf("%s helper: %w", c.role, err)
	}
	if a.Error != "" {
		return a, fmt.Errorf("%s helper: %s", c.role, a.Error)
	}
	return a, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop closes stdin and waits for the child (killing it after 10 s).
func (c *child) stop() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

func lastLines(b []byte, n int) string {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines > n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// runRole is main for a helper process.
func runRole(role string) error {
	in := bufio.NewReader(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("cannot read config: %w", err)
	}
	switch role {
	case "fleet":
		return roleFleet(line, in, out)
	case "naive":
		return roleNaive(line, in, out)
	case "naive-rest":
		return roleNaiveREST(line, in, out)
	case "echo":
		return roleEcho(line, in, out)
	}
	return fmt.Errorf("unknown role %q", role)
}

// serveCommands answers commands until EOF.
func serveCommands(in *bufio.Reader, out *json.Encoder, do func(command) answer) error {
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		var c command
		if err := json.Unmarshal(line, &c); err != nil {
			_ = out.Encode(answer{Error: "bad command: " + err.Error()})
			continue
		}
		if c.Op == "quit" {
			_ = out.Encode(answer{})
			return nil
		}
		if err := out.Encode(do(c)); err != nil {
			return err
		}
	}
}

func roleFleet(cfgLine []byte, in *bufio.Reader, out *json.Encoder) error {
	var cfg fleet.Config
	if err := json.Unmarshal(cfgLine, &cfg); err != nil {
		return err
	}
	f, err := fleet.New(cfg)
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		return err
	}
	defer f.Stop()
	_ = out.Encode(answer{Ready: true})
	return serveCommands(in, out, func(c command) answer {
		switch c.Op {
		case "connect":
			return answer{Joined: f.Connect(c.Addr, c.Timeout)}
		case "stats":
			s := f.Stats()
			return answer{Stats: &s}
		case "reset":
			f.Reset()
			return answer{}
		case "execs":
			return answer{Execs: f.Execs()}
		case "stream":
			f.Stream(c.Rate, c.Timeout)
			return answer{}
		case "close":
			f.CloseAll(c.Timeout)
			s := f.Stats()
			return answer{Stats: &s}
		case "wait-closed":
			fleet.WaitFor(c.Timeout, func() bool { return f.Stats().Connected == 0 })
			s := f.Stats()
			return answer{Stats: &s}
		}
		return answer{Error: "unknown op " + c.Op}
	})
}

type naiveConfig struct {
	RPC, HTTP string
	Token     string
	Interval  time.Duration
	LogDir    string // "": output is acked, not stored
}

func roleNaive(cfgLine []byte, in *bufio.Reader, out *json.Encoder) error {
	var cfg naiveConfig
	if err := json.Unmarshal(cfgLine, &cfg); err != nil {
		return err
	}
	m := naive.NewDispatcher(naive.Config{Token: []byte(cfg.Token), Interval: cfg.Interval, LogDir: cfg.LogDir})
	ln, err := net.Listen("tcp", cfg.RPC)
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		return err
	}
	go func() { _ = m.ServeRPC(ln) }()
	hl, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		return err
	}
	go func() { _ = http.Serve(hl, m.HTTPHandler()) }()
	_ = out.Encode(answer{Ready: true})
	return serveCommands(in, out, func(c command) answer { return answer{Error: "unknown op " + c.Op} })
}

type naiveRESTConfig struct {
	HTTP    string
	DataDir string
}

func roleNaiveREST(cfgLine []byte, in *bufio.Reader, out *json.Encoder) error {
	var cfg naiveRESTConfig
	if err := json.Unmarshal(cfgLine, &cfg); err != nil {
		return err
	}
	st, err := sqlite.Open(filepath.Join(cfg.DataDir, "rlsched.db"))
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		return err
	}
	defer st.Close()
	uid, err := ensureUser(st)
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		return err
	}
	hl, err := net.Listen("tcp", cfg.HTTP)
	if err != nil {
		_ = out.Encode(answer{Error: err.Error()})
		return err
	}
	go func() { _ = http.Serve(hl, naive.NewREST(st, uid)) }()
	_ = out.Encode(answer{Ready: true})
	return serveCommands(in, out, func(c command) answer { return answer{Error: "unknown op " + c.Op} })
}

func roleEcho(cfgLine []byte, in *bufio.Reader, out *json.Encoder) error {
	var cfg struct{ Addr string }
	if err := json.Unmarshal(cfgLine, &cfg); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- echo.Serve(cfg.Addr) }()
	// gnet.Run blocks; wait until the port answers.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", cfg.Addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-errc:
			_ = out.Encode(answer{Error: fmt.Sprint(err)})
			return err
		default:
		}
		if time.Now().After(deadline) {
			_ = out.Encode(answer{Error: "echo server did not listen"})
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = out.Encode(answer{Ready: true})
	return serveCommands(in, out, func(c command) answer { return answer{Error: "unknown op " + c.Op} })
}
