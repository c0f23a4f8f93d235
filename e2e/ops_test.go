package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/promcheck"
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestOpsMetrics: a master and a gateway in front of it, both binaries:
// their /metrics pass promtool, and the values move when a run is
// submitted through the gateway and finishes on a worker.
func TestOpsMetrics(t *testing.T) {
	b := newBed(t)
	shared := "e2e-shared-" + rig.RandHex(16)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data"), Env: []string{"GATEWAY_SHARED_SECRET=" + shared, "GATEWAY_TRUST_HEADERS=true"}})
	b.StartWorker("worker", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	gp := b.Start("gateway", b.ServerEnv("JWT_SECRET="+b.JWTSecret, "GATEWAY_SHARED_SECRET="+shared), "gateway",
		"--masters", m.URL, "--gateway-port", strconv.Itoa(rig.FreePort(t)), "--rate-limit-enabled=false")
	gwURL := gp.WaitLog(t, 30*time.Second, `"gateway started"`, func(l logLine) bool { return l.Msg() == "gateway started" }).Str("url")

	before := promcheck.Parse(t, promcheck.Scrape(t, m.URL+"/metrics"))
	alice, _ := signup(t, gwURL, "alice", "ADMIN")
	id, _ := b.submit(alice, map[string]any{"command": []string{"echo", "hello"}})
	alice.waitStatus(id, "SUCCEEDED", time.Minute)

	var after promcheck.Families
	var body []byte
	testutil.Eventually(t, time.Minute, func() (bool, string) {
		body = promcheck.Scrape(t, m.URL+"/metrics")
		after = promcheck.Parse(t, body)
		v, _ := after.Value("rlsched_runs", "status", "SUCCEEDED")
		return v == 1, "rlsched_runs{status=SUCCEEDED} is not 1 yet (counted at most every 5 s)"
	})
	promcheck.Check(t, body)
	moved := func(name string, want float64, labels ...string) {
		t.Helper()
		a, _ := after.Value(name, labels...)
		bf, _ := before.Value(name, labels...)
		if a-bf != want {
			t.Errorf("master %s%v moved by %v, want %v", name, labels, a-bf, want)
		}
	}
	moved("rlsched_runs_submitted_total", 1)
	moved("rlsched_runs_finished_total", 1, "status", "SUCCEEDED")
	moved("rlsched_dispatch_seconds", 1)
	if v, _ := after.Value("rlsched_workers", "state", "IDLE"); v != 1 {
		t.Errorf("rlsched_workers{state=IDLE} = %v, want 1", v)
	}
	if v, _ := after.Value("rlsched_heartbeats_total"); v < 1 {
		t.Errorf("rlsched_heartbeats_total = %v after a run of a worker beating every second", v)
	}
	if v, _ := after.Value("rlsched_log_bytes_total"); v < float64(len("hello\n")) {
		t.Errorf("rlsched_log_bytes_total = %v", v)
	}

	gbody := promcheck.Scrape(t, gwURL+"/metrics")
	promcheck.Check(t, gbody)
	g := promcheck.Parse(t, gbody)
	if v, _ := g.Value("rlsched_gateway_requests_total", "route", "submit", "status_class", "2xx", "service", "rl-master"); v != 1 {
		t.Errorf("gateway submissions answered 2xx: %v, want 1", v)
	}
	if v, _ := g.Value("rlsched_gateway_upstream_available", "upstream", m.URL); v != 1 {
		t.Errorf("gateway: the master is not available: %v", v)
	}
}

// TestOpsUsersAndWorkersCLI: an admin lists, re-roles, disables, enables,
// resets and deletes users with the CLI, on SQLite and on MySQL (through
// REST either way); `user add` writes each store itself; and drains,
// undrains and forgets a worker.
func TestOpsUsersAndWorkersCLI(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { opsUsersAndWorkers(t, nil) })
	t.Run("mysql", func(t *testing.T) {
		dsn := tempDatabase(t, testsvc.RequireMySQL(t), "e2e_ops_")
		opsUsersAndWorkers(t, []string{"MYSQL_DSN=" + dsn})
	})
}

func opsUsersAndWorkers(t *testing.T, backend []string) {
	b := newBed(t)
	data := filepath.Join(b.Dir, "data")
	// The first admin, straight into the store, before the master runs.
	add := exec.Command(b.Bin, "user", "add", "root", "--admin", "--data-dir", data)
	add.Env = b.ServerEnv(backend...)
	add.Stdin = strings.NewReader(rig.Password + "\n")
	if out, err := add.CombinedOutput(); err != nil || !strings.Contains(string(out), "ADMIN") {
		t.Fatalf("rlsched user add root --admin: %v\n%s", err, out)
	}
	m := b.StartMaster("master", rig.MasterOpts{DataDir: data, Env: append(backend, "REGISTRATION=closed")})
	anon := newClient(t, m.URL)
	// The public health answer names no path of the master's (issue 25: it
	// showed the log dir's): a visitor learns nothing of its disk layout.
	if r, _ := anon.Do("GET", "/api/monitor/health", nil); r.Status != 200 || strings.Contains(string(r.Body), data) || strings.Contains(string(r.Body), `"/`) {
		t.Fatalf("health for a visitor: %s (want 200 naming no path under %s)", r, data)
	}
	if r, _ := anon.Do("POST", "/api/auth/register", map[string]string{"username": "mallory", "password": rig.Password}); r.Status != 403 {
		t.Fatalf("register on a closed master: %s", r)
	}
	root := anon.login("root")
	root.Must("POST", "/api/admin/users", map[string]string{"username": "alice", "password": rig.Password}, 201, nil)
	alice := anon.login("alice")
	cfg := filepath.Join(b.Dir, "cli-root")
	cli := func(want int, args ...string) string {
		t.Helper()
		out, code := b.cli(cfg, append(args, "--server", m.URL)...)
		if code != want {
			t.Fatalf("rlsched %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli(0, "login", "-u", "root", "-p", rig.Password)

	out := cli(0, "user", "ls")
	if !strings.Contains(out, "root") || !strings.Contains(out, "alice") || !strings.Contains(out, "ADMIN") {
		t.Fatalf("user ls:\n%s", out)
	}
	var ls struct {
		Items []struct {
			Username string `json:"username"`
			Role     string `json:"role"`
			Disabled bool   `json:"disabled"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(cli(0, "user", "ls", "--json")), &ls); err != nil || len(ls.Items) != 2 {
		t.Fatalf("user ls --json: %+v %v", ls, err)
	}

	cli(0, "user", "role", "alice", "ADMIN")
	if r, _ := alice.Do("GET", "/api/auth/me", nil); r.Status != 401 {
		t.Fatalf("alice's token after a role change: %s", r)
	}
	alice = anon.login("alice")
	if r, _ := alice.Do("GET", "/api/admin/users", nil); r.Status != 200 {
		t.Fatalf("alice as an admin: %s", r)
	}
	cli(0, "user", "role", "alice", "user")
	alice = anon.login("alice")
	cli(0, "user", "disable", "alice")
	if r, _ := alice.Do("GET", "/api/tasks", nil); r.Status != 403 {
		t.Fatalf("a disabled user's token: %s", r)
	}
	if r, _ := anon.Do("POST", "/api/auth/login", map[string]string{"username": "alice", "password": rig.Password}); r.Status != 401 {
		t.Fatalf("a disabled user's sign-in: %s (must answer as a wrong password does)", r)
	}
	cli(0, "user", "enable", "alice")
	alice = anon.login("alice")
	id, _ := b.submit(alice, map[string]any{"command": []string{"true"}})
	cli(0, "user", "passwd", "alice", "-p", "a-brand-new-password")
	if r, _ := alice.Do("GET", "/api/auth/me", nil); r.Status != 401 {
		t.Fatalf("a token from before the new password: %s", r)
	}
	anon.Must("POST", "/api/auth/login", map[string]string{"username": "alice", "password": "a-brand-new-password"}, 200, nil)
	if out := cli(1, "user", "rm", "root"); !strings.Contains(out, "admin") {
		t.Fatalf("deleting the last admin:\n%s", out)
	}
	cli(0, "user", "rm", "alice")
	if tk, err := root.getTask(id); err != nil || !strings.HasPrefix(tk.User, "deleted user ") {
		t.Fatalf("the deleted user's run: %+v %v", tk, err)
	}
	if out := cli(1, "user", "disable", "alice"); !strings.Contains(out, "not found") {
		t.Fatalf("disabling a deleted user:\n%s", out)
	}

	// Workers: drain, a run waits; undrain, it runs; stopped, forgotten.
	w := b.StartWorker("worker", m.RPC, rig.WorkerOpts{ID: "w1"})
	m.WaitJoined(t, "w1")
	if out := cli(0, "workers", "drain", "w1"); !strings.Contains(out, "DRAINING") {
		t.Fatalf("workers drain:\n%s", out)
	}
	waiting, _ := b.submit(root, map[string]any{"command": []string{"true"}})
	// The scheduler's own view says why it waits: w1 is there, and full.
	var held struct{ Status, PendingCode string }
	root.Must("GET", "/api/tasks/"+waiting, nil, 200, &held)
	if held.Status != "QUEUED" || held.PendingCode != "resources" {
		t.Fatalf("a run beside a draining worker: %+v", held)
	}
	if out := cli(0, "workers"); !strings.Contains(out, "DRAINING") {
		t.Fatalf("workers:\n%s", out)
	}
	cli(0, "workers", "undrain", "w1")
	root.waitStatus(waiting, "SUCCEEDED", time.Minute)
	if out := cli(1, "workers", "forget", "w1"); !strings.Contains(out, "not DOWN") {
		t.Fatalf("forgetting a live worker:\n%s", out)
	}
	w.Kill(t)
	testutil.Eventually(t, time.Minute, func() (bool, string) {
		out := cli(0, "workers")
		return strings.Contains(out, "DOWN"), "w1 not DOWN yet:\n" + out
	})
	cli(0, "workers", "forget", "w1")
	if out := cli(0, "workers"); strings.Contains(out, "w1") {
		t.Fatalf("a forgotten worker is listed:\n%s", out)
	}
}
