package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// victimScript prints its pid and output dir, then waits for its release
// file (argv[1]) and exits 0: killed by anyone, it does not succeed.
const victimScript = `import os, sys, time
print("PID %d" % os.getpid(), flush=True)
print("OUT %s" % os.environ["RLSCHED_OUTPUT_DIR"], flush=True)
with open(os.path.join(os.environ["RLSCHED_OUTPUT_DIR"], "checkpoint"), "w") as f:
    f.write("victim")
deadline = time.time() + 120
while not os.path.exists(sys.argv[1]) and time.time() < deadline:
    time.sleep(0.1)
print("VICTIM DONE", flush=True)
`

// attackScript tries, as a run of another user, each way a run used to
// reach rlsched or another run (argv[1]: a JSON object of targets), and
// prints one "RESULT name ok|denied ..." line per attempt, plus the
// environment of every process whose /proc entry it could read.
const attackScript = `import json, os, signal, sys
t = json.loads(sys.argv[1])
def attempt(name, f):
    try:
        f()
        print("RESULT %s ok" % name, flush=True)
    except Exception as e:
        print("RESULT %s denied %s" % (name, type(e).__name__), flush=True)
def read(p):
    with open(p, "rb") as f:
        f.read(1)
def append(p):
    with open(p, "ab") as f:
        f.write(b"tampered\n")
for name, p in t.get("read", {}).items():
    attempt("read-" + name, lambda p=p: read(p))
for name, p in t.get("append", {}).items():
    attempt("append-" + name, lambda p=p: append(p))
for name, p in t.get("list", {}).items():
    attempt("list-" + name, lambda p=p: os.listdir(p))
attempt("environ-server", lambda: read("/proc/%d/environ" % t["server_pid"]))
attempt("mem-server", lambda: read("/proc/%d/mem" % t["server_pid"]))
attempt("environ-victim", lambda: read("/proc/%d/environ" % t["victim_pid"]))
attempt("signal-victim", lambda: os.kill(t["victim_pid"], signal.SIGTERM))
attempt("signal-victim-group", lambda: os.killpg(t["victim_pid"], signal.SIGTERM))
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    if int(pid) == os.getpid():
        continue
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            print("ENVIRON %s %s" % (pid, f.read().replace(b"\0", b" ").decode(errors="replace")), flush=True)
    except Exception:
        pass
attempt("own-output", lambda: append(os.path.join(os.environ["RLSCHED_OUTPUT_DIR"], "mine")))
# Last: where it works, the server is gone and nothing more is reported.
attempt("signal-server", lambda: os.kill(t["server_pid"], signal.SIGTERM))
print("ATTACK DONE", flush=True)
`

var resultLine = regexp.MustCompile(`(?m)^RESULT (\S+) (ok|denied)`)

// attackTargets are what a run of bob's tries to reach.
type attackTargets struct {
	Read      map[string]string `json:"read"`
	Append    map[string]string `json:"append"`
	List      map[string]string `json:"list"`
	ServerPID int               `json:"server_pid"`
	VictimPID int               `json:"victim_pid"`
}

// TestIsolation (issue 12): a USER's run cannot read secrets.env, the join
// token file or /proc/<pid>/environ of rlsched, cannot write the store,
// another run's log or output dir, and cannot signal another user's run,
// which SUCCEEDS; on `rlsched up` and on a standalone worker.
func TestIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root: runs under their own uids must be tested there")
		}
		t.Skip("runs under their own uids need rlsched running as root")
	}
	t.Run("up", func(t *testing.T) {
		b := newBed(t)
		data := filepath.Join(b.Dir, "data")
		up := b.startUp("up", data, "JWT_SECRET="+b.JWTSecret, "WORKER_JOIN_TOKEN="+b.JoinToken)
		alice, _ := signup(t, up.URL, "alice", "ADMIN")
		bob, _ := signup(t, up.URL, "bob", "USER")
		master := filepath.Join(data, "master")
		runIsolation(t, b, alice, bob, up.Cmd.Process.Pid, func(victim string) attackTargets {
			return attackTargets{
				Read: map[string]string{"secrets": filepath.Join(master, "secrets.env"), "store": filepath.Join(master, "rlsched.db"),
					"victim-log":        filepath.Join(master, "logs", victim+".log"),
					"victim-checkpoint": filepath.Join(data, "workers", "local-0", "outputs", victim, "1", "checkpoint")},
				Append: map[string]string{"store": filepath.Join(master, "rlsched.db"), "victim-log": filepath.Join(master, "logs", victim+".log"),
					"victim-output": filepath.Join(data, "workers", "local-0", "outputs", victim, "1", "planted")},
				List: map[string]string{"data": data, "outputs": filepath.Join(data, "workers", "local-0", "outputs")},
			}
		}, map[string]string{"JWT_SECRET": b.JWTSecret, "WORKER_JOIN_TOKEN": b.JoinToken})
	})
	t.Run("worker", func(t *testing.T) {
		b := newBed(t)
		m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
		tokenFile := filepath.Join(b.Dir, "join.token")
		if err := os.WriteFile(tokenFile, []byte(b.JoinToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		wdir := filepath.Join(b.Dir, "worker-w1")
		// The token both in a file and (as operators do) in the worker's
		// environment would be refused: give it in the file only.
		w := b.Start("worker-w1", b.ServerEnv("WORKER_JOIN_TOKEN_FILE="+tokenFile), rig.WorkerArgs(m.RPC, "w1", 2, 0, wdir)...)
		m.WaitJoined(t, "w1")
		alice, _ := signup(t, m.URL, "alice", "ADMIN")
		bob, _ := signup(t, m.URL, "bob", "USER")
		runIsolation(t, b, alice, bob, w.Cmd.Process.Pid, func(victim string) attackTargets {
			return attackTargets{
				Read: map[string]string{"token-file": tokenFile,
					"victim-checkpoint": filepath.Join(wdir, "outputs", victim, "1", "checkpoint")},
				Append: map[string]string{"victim-output": filepath.Join(wdir, "outputs", victim, "1", "planted")},
				List:   map[string]string{"spool": filepath.Join(wdir, "spool"), "outputs": filepath.Join(wdir, "outputs")},
			}
		}, map[string]string{"WORKER_JOIN_TOKEN": b.JoinToken})
	})
}

// runIsolation runs alice's victim, then bob's attack on it and on the
// server process serverPID, and checks every attempt was denied, no secret
// value reached bob's log, and the victim succeeded.
func runIsolation(t *testing.T, b *bed, alice, bob *client, serverPID int, targets func(victim string) attackTargets, secrets map[string]string) {
	t.Helper()
	release := filepath.Join(b.Dir, "release-victim")
	victim, _ := b.submit(alice, map[string]any{"name": "victim", "command": []string{"python3", "-c", victimScript, release}})
	alice.waitLogContains(victim, "OUT ", 60*time.Second)
	vlog, err := alice.logText(victim)
	if err != nil {
		t.Fatal(err)
	}
	var vpid int
	for _, line := range strings.Split(vlog, "\n") {
		if v, ok := strings.CutPrefix(line, "PID "); ok {
			vpid, _ = strconv.Atoi(v)
		}
	}
	if vpid <= 1 {
		t.Fatalf("the victim printed no pid:\n%s", vlog)
	}
	tg := targets(victim)
	tg.ServerPID, tg.VictimPID = serverPID, vpid
	arg, _ := json.Marshal(tg)

	attack, _ := b.submit(bob, map[string]any{"name": "attack", "command": []string{"python3", "-c", attackScript, string(arg)}})
	bob.waitStatus(attack, "SUCCEEDED", 60*time.Second)
	bob.waitLogContains(attack, "ATTACK DONE", 10*time.Second)
	out, err := bob.logText(attack)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]string{}
	for _, m := range resultLine.FindAllStringSubmatch(out, -1) {
		results[m[1]] = m[2]
	}
	want := []string{"environ-server", "mem-server", "environ-victim", "signal-victim", "signal-victim-group", "signal-server"}
	for name := range tg.Read {
		want = append(want, "read-"+name)
	}
	for name := range tg.Append {
		want = append(want, "append-"+name)
	}
	for name := range tg.List {
		want = append(want, "list-"+name)
	}
	for _, name := range want {
		switch results[name] {
		case "denied":
		case "ok":
			t.Errorf("bob's run could %s", name)
		default:
			t.Errorf("bob's run did not report %s:\n%s", name, out)
		}
	}
	if results["own-output"] != "ok" {
		t.Errorf("bob's run could not write its own output dir, so its denials prove nothing:\n%s", out)
	}
	for name, value := range secrets {
		if strings.Contains(out, value) {
			t.Errorf("bob's run read the value of %s through /proc", name)
		}
	}
	if strings.Contains(out, "RLSCHED_TASK_ID="+victim) {
		t.Errorf("bob's run read the victim's environment through /proc")
	}

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	alice.waitStatus(victim, "SUCCEEDED", 60*time.Second)
	if vlog, _ := alice.logText(victim); strings.Contains(vlog, "tampered") || !strings.Contains(vlog, "VICTIM DONE") {
		t.Errorf("the victim's log was changed or is incomplete:\n%s", vlog)
	}
}
