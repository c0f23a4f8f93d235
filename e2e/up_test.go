package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

var upURLLine = regexp.MustCompile(`(?m)^\s*URL:\s+(\S+)\s*$`)

// startUp runs `rlsched up` on dataDir with free ports and returns it with
// the URL it printed on stdout (checked against its JSON log).
func (b *bed) startUp(name, dataDir string, extraEnv ...string) *master {
	b.T.Helper()
	p := b.Start(name, b.ServerEnv(extraEnv...), "up", "--data-dir", dataDir, "--master-port", "0", "--rpc-port", "0", "--gateway-port", "0")
	m := b.AwaitMaster(p)
	gw := p.WaitLog(b.T, 30*time.Second, "gateway started", func(l logLine) bool { return l.Msg() == "gateway started" })
	var url string
	testutil.Eventually(b.T, 30*time.Second, func() (bool, string) {
		if mm := upURLLine.FindStringSubmatch(p.Stdout()); mm != nil {
			url = mm[1]
			return true, ""
		}
		if p.Exited() {
			b.T.Fatalf("rlsched up exited: %v\n%s", p.Err(), rig.Tail(p.Stderr(), 40))
		}
		return false, "rlsched up printed no URL: line; stdout:\n" + p.Stdout()
	})
	if url != gw.Str("url") {
		b.T.Fatalf("rlsched up printed URL %s but its gateway logged url %s", url, gw.Str("url"))
	}
	m.URL = url // everything below goes through the gateway, as a user's requests do
	m.WaitJoined(b.T, "local-0")
	return m
}

// TestUpPPO is the skeleton's "Done when": `rlsched up`, a user, a PPO run
// through REST to SUCCEEDED with its log, metrics and final reward, and the
// same through the CLI.
func TestUpPPO(t *testing.T) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	up := b.startUp("up", data)

	admin, _ := signup(t, up.URL, "alice", "ADMIN") // the first user of an empty system
	id, traceID := b.submit(admin, map[string]any{"algorithm": "PPO", "episodes": 200})
	tk := admin.waitStatus(id, "SUCCEEDED", 90*time.Second)
	if tk.Attempt != 1 || tk.ExitCode == nil || *tk.ExitCode != 0 || tk.FinalReward == nil {
		t.Fatalf("finished run: %v finalReward %v; want attempt 1, exit code 0 and a final reward", tk, tk.FinalReward)
	}
	if tk.TraceID != traceID || tk.User != "alice" || tk.Worker != "local-0" {
		t.Errorf("run %+v: want traceId %s, user alice, worker local-0", tk, traceID)
	}

	// The log file: TRACE_ID first, then the trainer's output.
	file := logFile(t, filepath.Join(data, "master"), id) // up keeps the master's state in DATA_DIR/master
	first, _, _ := strings.Cut(file, "\n")
	if first != "TRACE_ID:"+traceID {
		t.Errorf("first line of the log file is %q, want %q", first, "TRACE_ID:"+traceID)
	}
	if strings.Contains(file, "=== rlsched attempt") {
		t.Errorf("a first attempt's log has an attempt marker:\n%s", rig.Tail(file, 10))
	}
	// finalReward is the last FINAL_REWARD:x line.
	var final string
	for _, line := range strings.Split(file, "\n") {
		if v, ok := strings.CutPrefix(line, "FINAL_REWARD:"); ok {
			final = v
		}
	}
	if want, err := strconv.ParseFloat(strings.TrimSpace(final), 64); err != nil {
		t.Errorf("the log has no FINAL_REWARD line: %q", rig.Tail(file, 5))
	} else if *tk.FinalReward != want {
		t.Errorf("finalReward %v, want %v (the last FINAL_REWARD line)", *tk.FinalReward, want)
	}

	// The REST logs endpoint serves the same bytes, as raw text and as lines.
	raw, err := admin.logText(id)
	if err != nil || raw != file {
		t.Errorf("text/plain logs differ from the file (err %v): %d vs %d bytes", err, len(raw), len(file))
	}
	var page struct {
		Status     string   `json:"status"`
		Content    []string `json:"content"`
		Offset     int64    `json:"offset"`
		NextOffset int64    `json:"nextOffset"`
		EOF        bool     `json:"eof"`
	}
	admin.Must("GET", "/api/monitor/logs/"+id, nil, 200, &page)
	if page.Status != "SUCCESS" || !page.EOF || page.Offset != 0 || page.NextOffset != int64(len(file)) {
		t.Errorf("logs page: status %q eof %v offset %d nextOffset %d; want SUCCESS, eof, 0, %d",
			page.Status, page.EOF, page.Offset, page.NextOffset, len(file))
	}
	if got := strings.Join(page.Content, "\n") + "\n"; got != file {
		t.Errorf("JSON logs content differs from the file:\n%s\n----\n%s", rig.Tail(got, 5), rig.Tail(file, 5))
	}
	// A page from an offset inside the file starts there.
	admin.Must("GET", fmt.Sprintf("/api/monitor/logs/%s?offset=%d", id, len(first)+1), nil, 200, &page)
	if len(page.Content) == 0 || strings.HasPrefix(page.Content[0], "TRACE_ID:") {
		t.Errorf("logs from offset %d: %q", len(first)+1, page.Content[:min(len(page.Content), 2)])
	}

	// Metrics: one episode_reward point per episode.
	var metrics struct {
		TaskID string                  `json:"taskId"`
		Series map[string][][2]float64 `json:"series"`
	}
	admin.Must("GET", "/api/tasks/"+id+"/metrics", nil, 200, &metrics)
	er := metrics.Series["episode_reward"]
	if metrics.TaskID != id || len(er) != 200 {
		t.Fatalf("metrics: taskId %q, %d episode_reward points; want %s and 200", metrics.TaskID, len(er), id)
	}
	for i, p := range er {
		if p[0] != float64(i+1) {
			t.Fatalf("episode_reward point %d has step %v, want %d", i, p[0], i+1)
		}
	}
	admin.Must("GET", "/api/tasks/"+id+"/metrics?names=episode_reward,nonexistent", nil, 200, &metrics)
	if len(metrics.Series["episode_reward"]) != 200 || len(metrics.Series["nonexistent"]) != 0 {
		t.Errorf("metrics?names=: %d points, series %v", len(metrics.Series["episode_reward"]), keys(metrics.Series))
	}

	// The CLI, the way a user would: register, login, submit --wait.
	cfg := filepath.Join(b.Dir, "cli-config")
	for _, args := range [][]string{
		{"register", "-u", "bob", "-p", rig.Password, "--server", up.URL},
		{"login", "-u", "bob", "-p", rig.Password, "--server", up.URL},
	} {
		if out, code := b.cli(cfg, args...); code != 0 {
			t.Fatalf("rlsched %s: exit %d\n%s", args[0], code, out)
		}
	}
	if st, err := os.Stat(filepath.Join(cfg, "credentials.json")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file after login: %v, err %v; want mode 0600", st, err)
	}
	out, code := b.cli(cfg, "submit", "--algorithm", "REINFORCE", "--episodes", "50", "--wait", "--server", up.URL)
	if code != 0 || !strings.Contains(out, "SUCCEEDED") {
		t.Fatalf("rlsched submit --wait: exit %d, want 0 and SUCCEEDED\n%s", code, out)
	}
	var list struct {
		Items []task `json:"items"`
	}
	admin.Must("GET", "/api/tasks?user=bob", nil, 200, &list)
	if len(list.Items) != 1 || list.Items[0].Status != "SUCCEEDED" || list.Items[0].User != "bob" {
		t.Fatalf("bob's runs: %+v; want one SUCCEEDED run", list.Items)
	}
	b.track(list.Items[0].ID)
	if !strings.Contains(out, list.Items[0].ID) {
		t.Errorf("submit output does not name the run %s:\n%s", list.Items[0].ID, out)
	}
	var m2 struct {
		Series map[string]json.RawMessage `json:"series"`
	}
	admin.Must("GET", "/api/tasks/"+list.Items[0].ID+"/metrics?names=episode_reward", nil, 200, &m2)
	var pts [][2]float64
	if err := json.Unmarshal(m2.Series["episode_reward"], &pts); err != nil || len(pts) != 50 {
		t.Errorf("REINFORCE run has %d episode_reward points (err %v), want 50", len(pts), err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
