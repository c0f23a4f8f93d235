package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fasthttp/websocket"
)

// runInteractive measures interactive sessions (issue 34): the round trip
// of one keystroke from a WebSocket client through `rlsched gateway`, the
// master and a real `rlsched worker` to the session's PTY and its echo
// back, and what 100 idle sessions, each with a viewer attached, cost the
// master's memory. The session runs `cat`: the echo is the PTY's own, so
// the time is rlsched's path, not a shell's.
func runInteractive(e *env) (*report, error) {
	keys := pick(e, 200, 2000)
	idle := pick(e, 20, 100)
	rep := &report{size: fmt.Sprintf("%d keystrokes one at a time; %d idle sessions, one viewer each", keys, idle)}

	dataDir, err := e.dir("interactive", false)
	if err != nil {
		return nil, err
	}
	restore := gwSetEnv(map[string]string{"GATEWAY_TRUST_HEADERS": "true", "GATEWAY_SHARED_SECRET": benchGatewaySecret})
	m, err := e.startMaster(masterConf{name: "interactive", dataDir: dataDir})
	restore()
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.stop() }()
	tok, err := m.login()
	if err != nil {
		return nil, err
	}
	bin, _ := e.rlschedBin()
	wcmd := exec.Command(bin, "worker", "--master", m.rpc, "--id", "bench-interactive", "--slots", strconv.Itoa(idle+4), "--gpus", "0",
		"--data-dir", filepath.Join(dataDir, "worker"))
	wcmd.Env = append(os.Environ(), "WORKER_JOIN_TOKEN="+benchJoinToken, "LOG_FORMAT=json", "RUN_AS=none")
	logf, err := os.Create(filepath.Join(e.tmp, fmt.Sprintf("interactive-worker-%d.log", time.Now().UnixNano())))
	if err != nil {
		return nil, err
	}
	wcmd.Stdout, wcmd.Stderr = logf, logf
	err = e.start(wcmd)
	logf.Close()
	if err != nil {
		return nil, fmt.Errorf("cannot start rlsched worker: %w", err)
	}
	defer func() { _ = wcmd.Process.Signal(os.Interrupt); _ = wcmd.Wait() }()
	if err := waitIdleWorkers(m.url, 1, 30*time.Second); err != nil {
		return nil, err
	}
	gw, gwURL, err := e.startBenchGateway(m.url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = gw.Process.Signal(os.Interrupt); _ = gw.Wait() }()

	t := rep.newTable("Keystroke round trip: one byte typed, its echo seen (WebSocket client, loopback, `cat` on the PTY)",
		"path", "keys", "p50", "p99", "max")
	id, err := benchSession(m.url, tok)
	if err != nil {
		return nil, err
	}
	var gwP99 time.Duration
	for _, p := range []struct{ name, url string }{
		{"client → `rlsched gateway` → master → worker → PTY, and back", gwURL},
		{"client → master → worker → PTY, and back (no gateway)", m.url},
	} {
		rtts, err := keystrokes(p.url, tok, id, keys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		slices.Sort(rtts)
		q := func(f float64) time.Duration { return rtts[min(len(rtts)-1, int(f*float64(len(rtts))))] }
		e.logf("interactive: %s: p50 %v p99 %v max %v", p.name, q(0.5), q(0.99), rtts[len(rtts)-1])
		t.add(p.name, strconv.Itoa(len(rtts)), ms(q(0.5)), ms(q(0.99)), ms(rtts[len(rtts)-1]))
		if p.url == gwURL {
			gwP99 = q(0.99)
		}
	}

	// Memory: the master's RSS with one session, then with idle more, each
	// with a viewer attached through the gateway and nothing typed.
	runtime.GC()
	time.Sleep(2 * time.Second)
	rss0, _ := m.mem()
	heap0 := goHeap(m.url)
	ids := make([]string, idle)
	for i := range ids {
		if ids[i], err = submitSession(m.url, tok); err != nil {
			return nil, err
		}
	}
	for _, sid := range ids {
		if err := waitRunning(m.url, tok, sid, 60*time.Second); err != nil {
			return nil, err
		}
	}
	var viewers []*websocket.Conn
	defer func() {
		for _, c := range viewers {
			c.Close()
		}
	}()
	for _, sid := range ids {
		c, err := dialTerminal(gwURL, tok, sid)
		if err != nil {
			return nil, err
		}
		viewers = append(viewers, c)
	}
	time.Sleep(3 * time.Second) // the attaches settle (rings filled, goroutines parked)
	rss1, _ := m.mem()
	heap1 := goHeap(m.url)
	cost := rss1 - rss0
	mt := rep.newTable("Master memory for idle sessions (`rlsched master`: RSS, and the Go heap in use from its /metrics)",
		"sessions", "viewers", "RSS", "RSS per session", "heap in use", "heap per session")
	mt.add("1", "0", mib(rss0), "", mib(heap0), "")
	mt.add(strconv.Itoa(idle+1), strconv.Itoa(idle), mib(rss1), fmt.Sprintf("%.1f KiB", float64(cost)/float64(idle)/1024),
		mib(heap1), fmt.Sprintf("%.1f KiB", float64(heap1-heap0)/float64(idle)/1024))
	rep.note("The sessions run `cat` (RUN_AS=none, 0.01 core each) on one real `rlsched worker`; the gateway runs every filter. RSS is the process's, so it includes what the Go runtime keeps beyond its heap.")
	scaled := cost * 100 / int64(idle)
	rep.goal(gwP99 <= 10*time.Millisecond, "keystroke round trip through gateway, master and worker ≤ 10 ms p99 on loopback: %s", ms(gwP99))
	rep.goal(scaled <= 10<<20, "100 idle sessions cost the master ≤ 10 MiB: %s (%d sessions measured, scaled to 100)", mib(scaled), idle)
	rep.result = result{metric: "keystroke_p99_ms", value: float64(gwP99) / float64(time.Millisecond), unit: "ms", ref: "goal", refValue: 10}
	return rep, nil
}

// goHeap is go_memstats_heap_inuse_bytes of the master at base (0 when
// unreadable).
func goHeap(base string) int64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f)
		}
	}
	return 0
}

func submitSession(base, tok string) (string, error) {
	body := []byte(`{"name":"bench-interactive","kind":"interactive","command":["cat"],"cpus":0.01,"memoryMb":64}`)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/train", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ans struct {
		ID string `json:"id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &ans) != nil || ans.ID == "" {
		return "", fmt.Errorf("submit a session: %d %s", resp.StatusCode, b)
	}
	return ans.ID, nil
}

func waitRunning(base, tok, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/tasks/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var t struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&t)
			resp.Body.Close()
			switch t.Status {
			case "RUNNING":
				return nil
			case "FAILED", "CANCELLED", "SUCCEEDED", "TIMEOUT":
				return fmt.Errorf("session %s ended %s before it ran", id, t.Status)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("session %s not RUNNING within %v", id, timeout)
}

func benchSession(base, tok string) (string, error) {
	id, err := submitSession(base, tok)
	if err != nil {
		return "", err
	}
	return id, waitRunning(base, tok, id, 60*time.Second)
}

func dialTerminal(base, tok, id string) (*websocket.Conn, error) {
	u := "ws" + strings.TrimPrefix(base, "http") + "/ws/sessions/" + id
	c, resp, err := websocket.DefaultDialer.Dial(u, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("attach %s: HTTP %d: %w", id, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("attach %s: %w", id, err)
	}
	return c, nil
}

// keystrokes types n keys one at a time into session id's terminal at
// base, each after the echo of the one before, and returns their round
// trips.
func keystrokes(base, tok, id string, n int) ([]time.Duration, error) {
	c, err := dialTerminal(base, tok, id)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rtts := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		// A line every 64 keys keeps cat's line short.
		key := []byte{byte('a' + i%26)}
		if i%64 == 63 {
			key = []byte{'\r'}
		}
		t0 := time.Now()
		if err := c.WriteMessage(websocket.BinaryMessage, key); err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			typ, b, err := c.ReadMessage()
			if err != nil {
				return nil, fmt.Errorf("waiting for the echo of key %d: %w", i, err)
			}
			if typ == websocket.BinaryMessage && bytes.Contains(b, key[:1]) {
				break
			}
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}
