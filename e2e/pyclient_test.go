package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// pyClientProg drives rlsched.Client against a real system the way a
// notebook would. It prints "RUN <id>" for each run it makes (so the test
// cleans them up even when it fails midway) and "OK" when every check held.
const pyClientProg = `
import os, sys, tempfile, time, rlsched

url, user, password = os.environ["E2E_URL"], os.environ["E2E_USER"], os.environ["E2E_PASSWORD"]

def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)

def made(rid):
    print("RUN", rid, flush=True)
    return rid

def fails(fn, status, code):
    try:
        fn()
    except rlsched.APIError as e:
        check(e.status == status and e.code == code and e.message and e.traceId,
              "want %d %s, got %s" % (status, code, e))
        return e
    check(False, "no APIError, want %d %s" % (status, code))

# Without a token, and with a wrong password: 401.
fails(lambda: rlsched.Client(url).runs(), 401, "unauthorized")
fails(lambda: rlsched.Client(url).login(user, "not-the-password"), 401, "unauthorized")
c = rlsched.Client(url)
ans = c.login(user, password)
check(ans["user"]["username"] == user and c.token == ans["token"], "login: %r" % (ans,))

# A run reporting through the run helpers (the worker puts rlsched on PYTHONPATH).
prog = ("import rlsched\n"
        "for s in (1, 2, 3):\n"
        "    rlsched.metric(s, episode_reward=2.5 * s, loss=1.0 / s)\n"
        "rlsched.final_reward(7.5)\n")
before_ms = time.time() * 1000
rid = made(c.submit(command=["python3", "-c", prog], name="pyclient", project="pyclient-e2e",
                    params={"lr": 0.001}, max_retries=0, tags=["py"]))
t = c.wait(rid, timeout=120, poll=0.2)
check(t["id"] == rid and t["status"] == "SUCCEEDED" and t["finalReward"] == 7.5 and t["user"] == user
      and t["maxRetries"] == 0 and t["params"] == {"lr": 0.001} and t["tags"] == ["py"]
      and t["command"][-2:] == ["--lr", "0.001"], "finished run: %r" % (t,))
check(c.task(rid) == t, "task() differs from wait()'s Task")
m = c.metrics(rid)
check(m["episode_reward"] == [[1, 2.5], [2, 5.0], [3, 7.5]] and [p[0] for p in m["loss"]] == [1, 2, 3], "metrics: %r" % (m,))
check(list(c.metrics(rid, names=["loss"])) == ["loss"], "metrics(names=)")
mt = c.metrics(rid, names=["episode_reward"], times=True)["episode_reward"]
check([p[:2] for p in mt] == [[1, 2.5], [2, 5.0], [3, 7.5]]
      and all(before_ms <= p[2] <= time.time() * 1000 for p in mt), "metrics(times=True): %r" % (mt,))
log = c.logs(rid)
check(log["content"][0] == "TRACE_ID:" + t["traceId"] and "FINAL_REWARD:7.5" in log["content"]
      and log["nextOffset"] > 0, "logs: %r" % (log,))
check(c.logs(rid, offset=log["nextOffset"])["content"] == [], "logs past the end")
arts = c.artifacts(rid)
check(isinstance(arts, list) and all("path" in a for a in arts), "artifacts: %r" % (arts,))
to = tempfile.mkdtemp()
fails(lambda: c.download(rid, "no/such/file.txt", to), 404, "not_found")
check(os.listdir(to) == [], "a failed download left %r" % (os.listdir(to),))

# rerun: the same spec, one field overridden.
r2 = made(c.rerun(rid, name="pyclient-again"))
t2 = c.wait(r2, timeout=120, poll=0.2)
check(r2 != rid and t2["status"] == "SUCCEEDED" and t2["name"] == "pyclient-again" and t2["command"] == t["command"],
      "rerun: %r" % (t2,))

# runs(): every page followed, newest first, no run twice; limit stops early.
more = [made(c.submit(command=["true"], project="pyclient-e2e")) for _ in range(3)]
for i in more:
    check(c.wait(i, timeout=120, poll=0.2)["status"] == "SUCCEEDED", "run %s" % i)
want = {rid, r2, *more}
got = c.runs(project="pyclient-e2e", page_size=2)
ids = [x["id"] for x in got]
check(set(ids) == want and len(ids) == len(want), "runs(): %r, want %r" % (ids, want))
check([x["createdAt"] for x in got] == sorted((x["createdAt"] for x in got), reverse=True), "runs() not newest first")
check([x["id"] for x in c.runs(project="pyclient-e2e", limit=3, page_size=2)] == ids[:3], "runs(limit=3)")
check({x["id"] for x in c.runs(project="pyclient-e2e", status="SUCCEEDED")} == want, "runs(status=)")
check(c.runs(project="pyclient-e2e", status="FAILED") == [], "runs(status=FAILED)")
check(c.runs(project="no-such-project") == [], "runs() of an unknown project")

# cancel, and wait's timeout.
s = made(c.submit(command=["sleep", "600"], project="pyclient-e2e-cancel"))
deadline = time.monotonic() + 60
while c.task(s)["status"] != "RUNNING":
    check(time.monotonic() < deadline, "run %s never RUNNING" % s)
    time.sleep(0.1)
try:
    c.wait(s, timeout=0.5, poll=0.1)
    check(False, "wait returned on a running run")
except TimeoutError as e:
    check(s in str(e) and "RUNNING" in str(e), "timeout: %s" % e)
check(c.cancel(s)["id"] == s, "cancel")
check(c.wait(s, timeout=60, poll=0.2)["status"] == "CANCELLED", "cancelled run")
fails(lambda: c.cancel(s), 409, "conflict")

# Errors carry the API's code, message and trace id.
e = fails(lambda: c.task("r0000000000000000000000"), 404, "not_found")
fails(lambda: c.metrics("r0000000000000000000000"), 404, "not_found")
fails(lambda: c.submit(), 400, "bad_request")
e = fails(lambda: c.submit(command=["true"], gpus=-1), 400, "bad_request")
check("gpus" in e.message, "message names the field: %s" % e)

# A sweep: its members are runs with their cells and seeds; the server
# groups them by params without the seed. Member lr=2 seed=1 fails.
sprog = ("import rlsched, sys\n"
         "p = rlsched.params()\n"
         "for s in (1, 2, 3):\n"
         "    rlsched.metric(s, episode_reward=p['lr'] * s + p['seed'])\n"
         "rlsched.final_reward(p['lr'] * 3 + p['seed'])\n"
         "sys.exit(1 if (p['lr'], p['seed']) == (2, 1) else 0)\n")
ans = c.sweep(name="py", project="pyclient-e2e-sweep", base={"command": ["python3", "-c", sprog], "max_retries": 0},
              grid={"lr": [1, 2]}, seed_count=2, max_parallel=2)
for r in ans["runs"]:
    made(r)
sid = ans["id"]
check(sid and len(ans["runs"]) == 4, "sweep: %r" % (ans,))
members = [c.task(r) for r in ans["runs"]]
check([(t["params"]["lr"], t["params"]["seed"]) for t in members] == [(1, 0), (1, 1), (2, 0), (2, 1)], "sweep members: %r" % (members,))
check(all(t["sweepId"] == sid and "sweep:" + sid in t["tags"] and t["maxRetries"] == 0 for t in members), "members' sweep: %r" % (members,))
sw = c.wait_sweep(sid, timeout=180, poll=0.3)
check(sw["counts"]["SUCCEEDED"] == 3 and sw["counts"]["FAILED"] == 1 and "runs" not in sw, "sweep ended: %r" % (sw,))
info = c.sweep_info(sid)
g = info["groups"]
check(len(info["runs"]) == 4 and [x["params"] for x in g] == [{"lr": 2}, {"lr": 1}] and [x["n"] for x in g] == [2, 2]
      and g[0]["finalReward"]["mean"] == 6.5 and g[1]["finalReward"]["mean"] == 3.5
      and abs(g[1]["finalReward"]["std"] - 0.5 ** 0.5) < 1e-9 and g[0]["counts"]["FAILED"] == 1, "groups: %r" % (g,))
curves = c.sweep_metrics(sid)
lr1 = [x for x in curves if x["params"] == {"lr": 1}][0]["series"]
check([p[0] for p in lr1] == [1, 2, 3] and [p[1] for p in lr1] == [1.5, 2.5, 3.5] and all(p[3] == 2 for p in lr1)
      and all(abs(p[2] - 0.5 ** 0.5) < 1e-9 for p in lr1), "curves: %r" % (curves,))
check(len(c.runs(sweep=sid)) == 4 and {t["params"]["seed"] for t in c.runs(sweep=sid, params={"lr": 1})} == {0, 1}, "runs(sweep=)")
check(any(s["id"] == sid for s in c.sweeps(user=user)), "sweeps()")

# retry: two at once rerun the failed member once, recording its origin.
import threading
got = []
ts = [threading.Thread(target=lambda: got.append(c.retry_sweep(sid))) for _ in range(2)]
for th in ts: th.start()
for th in ts: th.join()
new = [r for rs in got for r in rs]
check(len(got) == 2 and len(new) == 1, "concurrent retries: %r" % (got,))
made(new[0])
failed = ans["runs"][3]
check(c.task(new[0])["rerunOf"] == failed and c.task(new[0])["sweepId"] == sid, "the retried run: %r" % (c.task(new[0]),))
check(c.wait(new[0], timeout=120, poll=0.2)["status"] == "FAILED", "the retry fails as its origin did")
check([t["id"] for t in c.runs(rerunOf=failed)] == new, "runs(rerunOf=)")

# maxParallel: one member runs, the other waits with sweep_limit; cancel stops both.
ans = c.sweep(base={"command": ["python3", "-c", "import time; time.sleep(600)"]}, seeds=[1, 2], max_parallel=1,
              project="pyclient-e2e-sweep")
for r in ans["runs"]:
    made(r)
deadline = time.monotonic() + 60
while True:
    a, b = c.task(ans["runs"][0]), c.task(ans["runs"][1])
    if a["status"] == "RUNNING" and b.get("pendingCode") == "sweep_limit":
        break
    check(time.monotonic() < deadline, "no member held by maxParallel: %r %r" % (a, b))
    time.sleep(0.1)
check(b["status"] == "QUEUED" and ans["id"] in b["pendingReason"], "the held member: %r" % (b,))
q = [e for e in c.queue() if e["id"] == b["id"]]
check(len(q) == 1 and q[0]["pendingCode"] == "sweep_limit" and q[0]["user"] == user and q[0]["position"] >= 1, "queue(): %r" % (q,))
check(c.set_priority(b["id"], 5)["priority"] == 5 and c.queue(limit=1)[0]["id"] == b["id"], "set_priority: %r" % (c.queue(),))
check(sorted(c.cancel_sweep(ans["id"])) == sorted(ans["runs"]), "cancel_sweep")
for r in ans["runs"]:
    check(c.wait(r, timeout=60, poll=0.2)["status"] == "CANCELLED", "cancelled member %s" % r)
check(c.wait_sweep(ans["id"], timeout=60, poll=0.2)["counts"]["CANCELLED"] == 2, "the cancelled sweep")
fails(lambda: c.sweep(base={"command": ["true"]}, grid={}), 400, "bad_request")
e = fails(lambda: c.sweep(base={"command": ["true"]}, random={"lr": {"dist": "loguniform", "min": 0, "max": 1}}, samples=2), 400, "bad_request")
check(e.message.startswith("random.lr.min"), "the message names the field: %s" % e)

# A search (issue 35): tpe with ASHA through sweep() (early_stop's names
# camelCased), sweep_info's search fields, a bad early_stop's field named.
prog = "import rlsched\np = rlsched.params()\nfor s in (1, 2):\n    rlsched.metric(s, episode_reward=p['lr'])\n"
lr = {"lr": {"dist": "uniform", "min": 0, "max": 1}}
ans = c.sweep(base={"command": ["python3", "-c", prog]}, method="tpe", budget=2, max_parallel=2, random_seed=3, random=lr,
              early_stop={"method": "asha", "min_steps": 1, "reduction_factor": 2}, project="pyclient-e2e-sweep")
for r in ans["runs"]:
    made(r)
check(len(ans["runs"]) == 2, "a tpe sweep's first proposals: %r" % (ans,))
c.wait_sweep(ans["id"], timeout=180, poll=0.3)
info = c.sweep_info(ans["id"])
lrs = {t["params"]["lr"] for t in info["runs"] if t["status"] == "SUCCEEDED"}
best = info["best"]
check(info["method"] == "tpe" and info["budget"] == 2 and info["members"] == 2 and info["metric"] == "episode_reward"
      and best is not None and best["params"]["lr"] == max(lrs) and best["value"] == max(lrs) and len(best["ci"]) == 2
      and info["importance"] == [] and info["unreported"] == [] and info["noObjective"] == []
      and all(st["error"].startswith("stopped at rung") for st in info["stops"]), "sweep_info of a search: %r" % (info,))
e = fails(lambda: c.sweep(base={"command": ["true"]}, method="tpe", budget=2, random=lr,
                          early_stop={"method": "asha", "rungs": [3, 1]}), 400, "bad_request")
check(e.message.startswith("earlyStop.rungs[1]"), "the message names the field: %s" % e)

# Dependencies and pipelines (issue 29): after= waits for a run and starts once it
# succeeded; after a failed run, a child that needs success is created CANCELLED.
ok = made(c.submit(command=["true"], name="parent-ok"))
bad = made(c.submit(command=["false"], name="parent-bad", max_retries=0))
child = made(c.submit(command=["true"], after=[{"run": ok, "when": "succeeded"}], inputs_from=[ok]))
check(c.wait(child, timeout=120, poll=0.2)["status"] == "SUCCEEDED" and c.task(child)["after"][0]["run"] == ok, "the child of a run that succeeded: %r" % (c.task(child),))
check(c.wait(bad, timeout=120, poll=0.2)["status"] == "FAILED", "the failing parent")
late = made(c.submit(command=["true"], after={"run": bad, "when": "succeeded"}))
t = c.task(late)
check(t["status"] == "CANCELLED" and t["reason"] == "dependency" and bad in t["error"], "a child of a failed parent: %r" % (t,))
fails(lambda: c.submit(command=["true"], after="nosuchrun"), 400, "bad_request")
# train → eval (fails) → report: wait_pipeline sees eval FAILED and the report
# CANCELLED; retry_pipeline reruns those two, not train.
p = c.pipeline(name="py-pipe", steps=[
    {"name": "train", "command": ["true"]},
    {"name": "eval", "command": ["false"], "after": "train", "max_retries": 0},
    {"name": "report", "command": ["true"], "after": ["eval"]}])
for r in p["runs"].values():
    made(r)
done = {s["name"]: s for s in c.wait_pipeline(p["id"], timeout=120, poll=0.2)["steps"]}
check({k: v["status"] for k, v in done.items()} == {"train": "SUCCEEDED", "eval": "FAILED", "report": "CANCELLED"}
      and done["report"]["after"] == ["eval"] and done["report"]["depth"] == 2, "the pipeline: %r" % (done,))
again = c.retry_pipeline(p["id"])
for r in again["runs"].values():
    made(r)
check(sorted(again["runs"]) == ["eval", "report"], "retry_pipeline reran %r, want eval and report" % (again,))
steps = {s["name"]: s["run"] for s in c.pipeline_info(p["id"])["steps"]}
check(steps == {"train": p["runs"]["train"], "eval": again["runs"]["eval"], "report": again["runs"]["report"]}, "after the retry: %r" % (steps,))
check(c.wait(again["runs"]["report"], timeout=120, poll=0.2)["status"] == "CANCELLED", "the retried report, after eval failed again")
fails(lambda: c.pipeline(name="dup", steps=[{"name": "a", "command": ["true"]}, {"name": "a", "command": ["true"]}]), 400, "bad_request")

# Quotas (the user is an admin): set, seen in usage() and quotas(), lifted again.
check(c.set_quota(user, gpus=3) == {"user": user, "gpus": 3, "runs": None}, "set_quota")
u = [x for x in c.usage() if x["user"] == user]
check(len(u) == 1 and u[0]["quota"] == {"gpus": 3, "runs": None} and u[0]["usage"] > 0, "usage(): %r" % (u,))
check({"user": user, "gpus": 3, "runs": None} in c.quotas(), "quotas(): %r" % (c.quotas(),))
check(c.set_quota(user) == {"user": user, "gpus": None, "runs": None}, "the quota lifted")
fails(lambda: c.set_quota("no-such-user", gpus=1), 404, "not_found")

# The master serves this client, to anyone.
import urllib.request
with urllib.request.urlopen(url + "/rlsched.py") as resp:
    check(resp.read() == open(rlsched.__file__, "rb").read(), "/rlsched.py is not this client")
print("OK", flush=True)
`

// TestPythonClient: scripts/rlsched.py's Client against `rlsched up`
// (through its gateway): login, submit, wait, metrics, logs, runs across
// pages, rerun, cancel, a sweep (its members, groups, curves, retry,
// maxParallel, cancel), dependencies and a pipeline with its retry, the
// queue, a priority, usage and quotas, errors
// raised as APIError with the API's code, and /rlsched.py served.
func TestPythonClient(t *testing.T) {
	b := newBed(t)
	scripts, err := filepath.Abs(filepath.Join("..", "scripts"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(scripts, "rlsched.py")); err != nil {
		t.Fatalf("the client: %v", err)
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3: %v", err) // newBed's package doc: e2e needs python3
	}
	up := b.startUp("up", filepath.Join(b.Dir, "data"))
	signup(t, up.URL, "alice", "ADMIN")

	prog := filepath.Join(b.Dir, "client.py")
	if err := os.WriteFile(prog, []byte(pyClientProg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, prog)
	cmd.Env = append(b.ServerEnv(), "PYTHONPATH="+scripts, "PYTHONDONTWRITEBYTECODE=1",
		"E2E_URL="+up.URL, "E2E_USER=alice", "E2E_PASSWORD="+rig.Password)
	cmd.Dir = b.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	for _, line := range strings.Split(out.String(), "\n") {
		if id, ok := strings.CutPrefix(line, "RUN "); ok {
			b.track(strings.TrimSpace(id))
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the client script did not finish within 4 minutes; output:\n%s", out.String())
	}
	if err != nil || !strings.HasSuffix(strings.TrimSpace(out.String()), "OK") {
		t.Fatalf("client script: %v; output:\n%s", err, out.String())
	}
}
