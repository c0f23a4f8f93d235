package e2e

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// checkpointScript: attempt 1 writes a checkpoint (then renames it into
// place) every 0.25 s until killed; a later attempt says which one it
// found and when it was written.
const checkpointScript = `
import json, os, time
out, attempt = os.environ["RLSCHED_OUTPUT_DIR"], os.environ["RLSCHED_ATTEMPT"]
ck = os.path.join(out, "ckpt.json")
ep = 0
if os.path.exists(ck):
    c = json.load(open(ck))
    ep = c["episode"]
    print("resumed from episode %d written at %.3f" % (ep, c["at"]), flush=True)
if attempt != "1":
    raise SystemExit(0)
while True:
    ep += 1
    with open(ck + ".tmp", "w") as f:
        json.dump({"episode": ep, "at": time.time()}, f)
    os.replace(ck + ".tmp", ck)
    print("episode", ep, flush=True)
    time.sleep(0.25)
`

// TestResumeFromACheckpointUnder2sOld (issue 32): a worker whose periodic
// walk would come only after an hour is SIGKILLed mid-run; the resumed
// attempt starts from a checkpoint written less than 2 s before the kill,
// because each one went to the master when the run renamed it into place.
func TestResumeFromACheckpointUnder2sOld(t *testing.T) {
	b := newBed(t)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	w1 := b.StartWorker("worker-w1", m.RPC, rig.WorkerOpts{ID: "w1", Env: []string{"ARTIFACT_SYNC_SECONDS=3600"}})
	m.WaitJoined(t, "w1")
	alice, _ := signup(t, m.URL, "alice", "ADMIN")
	id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-c", checkpointScript}, "maxRetries": 1})
	alice.waitLogContains(id, "episode 12\n", 60*time.Second)

	w1.Kill(t)
	killed := time.Now()
	b.StartWorker("worker-w2", m.RPC, rig.WorkerOpts{ID: "w2"})
	m.WaitJoined(t, "w2")
	tk := alice.waitStatus(id, "SUCCEEDED", time.Duration(taskTTLSeconds+60)*time.Second)
	if tk.Attempt != 2 {
		t.Fatalf("finished run: %v; want attempt 2", tk)
	}
	text, err := alice.logText(id)
	if err != nil {
		t.Fatal(err)
	}
	mm := regexp.MustCompile(`resumed from episode (\d+) written at ([0-9.]+)\n`).FindStringSubmatch(text)
	if mm == nil {
		t.Fatalf("attempt 2 found no checkpoint; log:\n%s", rig.Tail(text, 20))
	}
	at, _ := strconv.ParseFloat(mm[2], 64)
	age := killed.Sub(time.Unix(0, int64(at*1e9)))
	t.Logf("resumed from episode %s, written %v before the kill", mm[1], age.Round(time.Millisecond))
	if age >= 2*time.Second {
		t.Fatalf("resumed from episode %s written %v before the kill; want one under 2 s old", mm[1], age)
	}
}
