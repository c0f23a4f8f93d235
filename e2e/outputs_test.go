package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/s3test"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// tfeventsPy writes TensorBoard event files with the standard library
// only: TFRecord framing with masked CRC-32C, an Event with a simple_value
// summary, hand-encoded (TensorFlow's field numbers).
const tfeventsPy = `import struct, time
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xFFFFFFFF
def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([b])
        out += bytes([b | 0x80])
def ld(num, b):
    return varint(num << 3 | 2) + varint(len(b)) + b
def event(step, tag, value):
    v = ld(1, tag.encode()) + varint(2 << 3 | 5) + struct.pack("<f", value)
    return varint(1 << 3 | 1) + struct.pack("<d", time.time()) + varint(2 << 3) + varint(step) + ld(5, ld(1, v))
def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", crc(n)) + data + struct.pack("<I", crc(data))
`

// outputsScript: attempt 1 writes a checkpoint, an event file and a file
// over the file limit, then sleeps until killed; a later attempt reports
// what it found and ends.
const outputsScript = tfeventsPy + `
import json, os
out, attempt = os.environ["RLSCHED_OUTPUT_DIR"], os.environ["RLSCHED_ATTEMPT"]
print("attempt", attempt, "resume", os.environ.get("RLSCHED_RESUME", "unset"), flush=True)
ck = os.path.join(out, "checkpoint.json")
if os.path.exists(ck):
    print("resumed from episode", json.load(open(ck))["episode"], flush=True)
if attempt == "1":
    with open(os.path.join(out, "big.bin"), "wb") as f:
        f.write(b"b" * 2000000)
    os.makedirs(os.path.join(out, "tb", "train"))
    with open(os.path.join(out, "tb", "train", "events.out.tfevents.1.e2e"), "wb") as f:
        for s in range(5):
            f.write(record(event(10 * s, "tb/loss", 1.0 / (s + 1))))
    with open(ck + ".tmp", "w") as f:
        json.dump({"episode": 5}, f)
    os.replace(ck + ".tmp", ck)
    print("saved", flush=True)
    time.sleep(300)
`

type artifactJSON struct {
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	SHA256     string    `json:"sha256"`
	Attempt    int       `json:"attempt"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

// artifacts lists a run's files (q: "" or "?attempt=N").
func (c *client) artifacts(id, q string) (map[string]artifactJSON, error) {
	r, err := c.Do("GET", "/api/tasks/"+id+"/artifacts"+q, nil)
	if err != nil {
		return nil, err
	}
	if r.Status != 200 {
		return nil, fmt.Errorf("GET artifacts: %s", r)
	}
	var b struct{ Items []artifactJSON }
	if err := json.Unmarshal(r.Body, &b); err != nil {
		return nil, err
	}
	m := map[string]artifactJSON{}
	for _, a := range b.Items {
		m[a.Path] = a
	}
	return m, nil
}

// startOutputWorker runs a worker that syncs outputs every second.
func (b *bed) startOutputWorker(name, rpc, id string) *proc {
	b.T.Helper()
	return b.StartWorker(name, rpc, rig.WorkerOpts{ID: id, Env: []string{"ARTIFACT_SYNC_SECONDS=1"}})
}

// s3Env starts a SeaweedFS of the test's own and returns a master's
// ARTIFACT_S3_* for it.
func s3Env(t *testing.T) []string {
	t.Helper()
	s := s3test.Start(t)
	return []string{"ARTIFACT_S3_ENDPOINT=" + s.Endpoint, "ARTIFACT_S3_BUCKET=" + s.Bucket, "ARTIFACT_S3_ACCESS_KEY=" + s.AccessKey,
		"ARTIFACT_S3_SECRET_KEY=" + s.SecretKey, "ARTIFACT_S3_REGION=" + s3test.Region, "ARTIFACT_S3_PREFIX=e2e"}
}

// TestOutputsResumeAfterWorkerKill: a run's checkpoint and event file reach
// the master while it runs (REST lists them, its TensorBoard scalars are
// metrics within 10 s, the file over ARTIFACT_MAX_FILE_BYTES is a warning);
// its worker is SIGKILLed, and attempt 2 starts on another worker with the
// last synced checkpoint and RLSCHED_RESUME=1. Against the disk store and,
// the same, against S3 (SeaweedFS).
func TestOutputsResumeAfterWorkerKill(t *testing.T) {
	for _, backend := range []string{"disk", "s3"} {
		t.Run(backend, func(t *testing.T) {
			b := newBed(t)
			env := []string{"ARTIFACT_MAX_FILE_BYTES=1000000"}
			if backend == "s3" {
				env = append(env, s3Env(t)...)
			}
			data := filepath.Join(b.Dir, "data")
			m := b.StartMaster("master", rig.MasterOpts{DataDir: data, Env: env})
			w1 := b.startOutputWorker("worker-w1", m.RPC, "w1")
			m.WaitJoined(t, "w1")
			alice, _ := signup(t, m.URL, "alice", "ADMIN")
			id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-c", outputsScript}, "maxRetries": 1})
			alice.waitLogContains(id, "saved\n", 30*time.Second)
			saved := time.Now()

			var files map[string]artifactJSON
			testutil.Eventually(t, 20*time.Second, func() (bool, string) {
				var err error
				if files, err = alice.artifacts(id, ""); err != nil {
					return false, err.Error()
				}
				_, ck := files["checkpoint.json"]
				_, ev := files["tb/train/events.out.tfevents.1.e2e"]
				return ck && ev, fmt.Sprintf("artifacts %v", files)
			})
			if _, ok := files["big.bin"]; ok {
				t.Fatal("a file over ARTIFACT_MAX_FILE_BYTES was kept")
			}
			if ck := files["checkpoint.json"]; ck.Attempt != 1 || ck.Size != int64(len(`{"episode": 5}`)) {
				t.Fatalf("checkpoint.json listed as %+v", ck)
			}
			testutil.Eventually(t, 10*time.Second, func() (bool, string) {
				r, err := alice.Do("GET", "/api/tasks/"+id+"/metrics?names=tb/loss", nil)
				if err != nil {
					return false, err.Error()
				}
				var s struct{ Series map[string][][2]float64 }
				_ = json.Unmarshal(r.Body, &s)
				pts := s.Series["tb/loss"]
				return len(pts) == 5 && pts[4] == [2]float64{40, float64(float32(0.2))}, "metrics " + r.String()
			})
			t.Logf("checkpoint listed and TensorBoard scalars stored %v after the run saved them", time.Since(saved).Round(time.Millisecond))
			testutil.Eventually(t, 10*time.Second, func() (bool, string) {
				r, err := alice.Do("GET", "/api/tasks/"+id, nil)
				if err != nil {
					return false, err.Error()
				}
				var tk struct {
					Warnings []struct{ Code, Message string }
				}
				_ = json.Unmarshal(r.Body, &tk)
				for _, w := range tk.Warnings {
					if w.Code == "artifact_limit" && strings.Contains(w.Message, "big.bin") {
						return true, ""
					}
				}
				return false, "warnings " + r.String()
			})

			w1.Kill(t)
			alice.waitTask(id, time.Duration(taskTTLSeconds+15)*time.Second, "QUEUED with attempt 2", func(tk task) bool {
				return tk.Status == "QUEUED" && tk.Attempt == 2
			})
			b.startOutputWorker("worker-w2", m.RPC, "w2")
			m.WaitJoined(t, "w2")
			tk := alice.waitStatus(id, "SUCCEEDED", 60*time.Second)
			if tk.Attempt != 2 || tk.Worker != "w2" {
				t.Fatalf("finished run: %v; want attempt 2 on w2", tk)
			}
			text, err := alice.logText(id)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text, "attempt 1 resume unset\n") || !strings.Contains(text, "attempt 2 resume 1\nresumed from episode 5\n") {
				t.Fatalf("log:\n%s", text)
			}
			// The file as stored, whole and by range, through REST.
			r := alice.Must("GET", "/api/tasks/"+id+"/artifacts/checkpoint.json", nil, 200, nil)
			sum := sha256.Sum256(r.Body)
			if string(r.Body) != `{"episode": 5}` || r.Header.Get("ETag") != `"`+hex.EncodeToString(sum[:])+`"` {
				t.Fatalf("checkpoint.json: %s %v", r, r.Header)
			}
			r = alice.Must("GET", "/api/tasks/"+id+"/artifacts/checkpoint.json", nil, 206, nil, "Range", "bytes=2-8")
			if string(r.Body) != `episode` || r.Header.Get("Content-Range") != "bytes 2-8/14" {
				t.Fatalf("a range: %s %v", r, r.Header)
			}
			if files, err := alice.artifacts(id, "?attempt=2"); err != nil || len(files) != 0 {
				t.Fatalf("attempt 2 uploaded %v (%v): its restored files must not go back", files, err)
			}
		})
	}
}

// TestOutputsTwoMastersOneBucket: masters sharing MySQL, Redis and one S3
// bucket: a run's file uploaded through the master its worker joined is
// listed and downloaded through the other.
func TestOutputsTwoMastersOneBucket(t *testing.T) {
	b := newBed(t)
	env := append(mmBackends(t, b, ""), s3Env(t)...)
	ms := b.mmStartMasters(2, env)
	// Only the run's final sync uploads: a periodic one could catch
	// model.bin half written and store it as a version of its own
	// (stored_files 2 in CI).
	b.StartWorker("worker-w1", ms[0].RPC, rig.WorkerOpts{ID: "w1", Env: []string{"ARTIFACT_SYNC_SECONDS=3600"}})
	ms[0].WaitJoined(t, "w1")
	alice, _ := signup(t, ms[0].URL, "alice", "ADMIN")
	script := `import os
with open(os.path.join(os.environ["RLSCHED_OUTPUT_DIR"], "model.bin"), "wb") as f:
    f.write(bytes(range(256)) * 12288)
`
	id, _ := b.submit(alice, map[string]any{"command": []string{"python3", "-c", script}})
	alice.waitStatus(id, "SUCCEEDED", 60*time.Second)
	var health struct {
		Artifacts struct {
			StoredFiles int64 `json:"stored_files"`
			Staged      bool  `json:"staged"`
		} `json:"artifacts"`
	}
	alice.Must("GET", "/api/monitor/health", nil, 200, &health)
	if health.Artifacts.StoredFiles != 1 || health.Artifacts.Staged {
		t.Fatalf("health of the receiving master: %+v, want one file stored, S3 (not staged)", health.Artifacts)
	}
	other := newClient(t, ms[1].URL).as(alice.Token)
	files, err := other.artifacts(id, "")
	if err != nil || files["model.bin"].Size != 256*12288 {
		t.Fatalf("through the other master: %v, %v", files, err)
	}
	want := bytes.Repeat(func() []byte {
		p := make([]byte, 256)
		for i := range p {
			p[i] = byte(i)
		}
		return p
	}(), 12288)
	r := other.Must("GET", "/api/tasks/"+id+"/artifacts/model.bin", nil, 200, nil)
	if !bytes.Equal(r.Body, want) {
		t.Fatalf("model.bin through the other master: %d bytes", len(r.Body))
	}
}
