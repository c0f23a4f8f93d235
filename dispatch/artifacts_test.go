package dispatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/artifact/disk"
	"github.com/rlsched/rlsched/artifact/s3"
	"github.com/rlsched/rlsched/artifactpipe"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/s3test"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/lease/leasetest"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/worker"
)

// outputHarness is a harness whose master keeps outputs in a disk store.
type outputHarness struct {
	*harness
	blobs   artifact.Store
	blobDir string // of a disk store
}

func newOutputHarness(t *testing.T, clocked bool, mut func(*Config)) *outputHarness {
	t.Helper()
	oh := &outputHarness{blobDir: filepath.Join(t.TempDir(), "artifacts")}
	blobs, err := disk.Open(oh.blobDir)
	if err != nil {
		t.Fatal(err)
	}
	return oh.start(t, blobs, clocked, mut)
}

func (oh *outputHarness) start(t *testing.T, blobs artifact.Store, clocked bool, mut func(*Config)) *outputHarness {
	t.Helper()
	oh.blobs = blobs
	var st store.Store
	wrap := func(s store.Store) store.Store { st = s; return s }
	withOutputs := func(c *Config) {
		p, err := artifactpipe.New(artifactpipe.Config{Blobs: oh.blobs, Index: st, Logger: c.Logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close) // after the master stops (cleanups run last first)
		c.Outputs, c.Blobs = p, oh.blobs
		if mut != nil {
			mut(c)
		}
	}
	if clocked {
		oh.harness = startClockedHarness(t, wrap, withOutputs)
	} else {
		oh.harness = startHarness(t, nil, wrap, withOutputs)
	}
	return oh
}

// startClockedHarness is newClockedHarness with the store wrapped.
func startClockedHarness(t *testing.T, wrap func(store.Store) store.Store, mut func(*Config)) *harness {
	t.Helper()
	c := leasetest.NewClock()
	c.Advance(time.Since(c.Now()))
	return startHarness(t, c, wrap, mut)
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// seed stores data as path of attempt of run id, as an upload would have.
func (oh *outputHarness) seed(t *testing.T, id string, attempt int, path string, data []byte, mod time.Time) core.Artifact {
	t.Helper()
	b, err := oh.blobs.Put(t.Context(), bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	a := core.Artifact{TaskID: id, Attempt: attempt, Path: path, Size: b.Size, SHA256: b.SHA256, ModifiedAt: mod}
	if err := oh.st.PutArtifact(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	return a
}

// Chunks with bad paths, of a run the worker does not hold, or with a
// stale fence are refused and logged, and nothing of them is kept; a good
// one is stored and indexed; Metric frames become metric points.
func TestOutputChunksRefused(t *testing.T) {
	oh := newOutputHarness(t, true, nil)
	p := dial(t, oh.m.Addr())
	if ack := p.hello("w1", 1, 0); ack.ArtifactWindow < artifactpipe.MinWindow {
		t.Fatalf("HelloAck artifact window %d", ack.ArtifactWindow)
	}
	task := oh.submit(t, 0, "true")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.Resume || len(ex.Restore) != 0 {
		t.Fatalf("a first attempt resumes: %v", ex)
	}
	chunk := func(path string, fence uint64) *pb.ArtifactAck {
		t.Helper()
		p.send(&pb.ArtifactChunk{TaskId: task.ID, Attempt: 1, Fence: fence, Path: path, Data: []byte("evil"), Size: 4, Last: true})
		return p.expect(&pb.ArtifactAck{}).(*pb.ArtifactAck)
	}
	for _, bad := range []string{"../../x", "/etc/passwd", "a\x00b", strings.Repeat("a", 5000), "a/../../b", ""} {
		if ack := chunk(bad, ex.Fence); !strings.HasPrefix(ack.Error, "refused: invalid artifact path") {
			t.Fatalf("chunk named %.40q: %+v", bad, ack)
		}
	}
	if ack := chunk("ok.txt", ex.Fence+1); ack.Error != "fenced" {
		t.Fatalf("a stale fence: %+v", ack)
	}
	p.send(&pb.ArtifactChunk{TaskId: "r-not-mine", Attempt: 1, Fence: ex.Fence, Path: "x", Size: 1, Last: true, Data: []byte("x")})
	if ack := p.expect(&pb.ArtifactAck{}).(*pb.ArtifactAck); ack.Error != "fenced" {
		t.Fatalf("a run the worker does not hold: %+v", ack)
	}
	if log := oh.logs.String(); !strings.Contains(log, "refusing an ArtifactChunk") || !strings.Contains(log, "refusing an ArtifactChunk with a stale fence") {
		t.Fatalf("refusals not logged:\n%s", log)
	}
	if rows, _ := oh.st.Artifacts(t.Context(), task.ID, 0); len(rows) != 0 {
		t.Fatalf("refused chunks indexed: %+v", rows)
	}
	if blobs := files(t, filepath.Join(oh.blobDir, "sha256")); len(blobs) != 0 {
		t.Fatalf("refused chunks stored: %v", blobs)
	}
	if ack := chunk("ok.txt", ex.Fence); !ack.Done || ack.Error != "" || ack.Offset != 4 || ack.Window == 0 {
		t.Fatalf("a good chunk: %+v", ack)
	}
	row, err := oh.st.Artifact(t.Context(), task.ID, "ok.txt", 0)
	if err != nil || row.SHA256 != sum([]byte("evil")) || row.Attempt != 1 {
		t.Fatalf("row %+v, %v", row, err)
	}
	p.send(&pb.Metric{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Step: 3, Values: map[string]float64{"train/loss": 0.25}, TimeUnixMs: 1_700_000_000_500})
	p.send(&pb.Metric{TaskId: task.ID, Attempt: 1, Fence: ex.Fence + 1, Step: 4, Values: map[string]float64{"train/loss": 9}})
	testutil.WaitFor(t, 10*time.Second, "the TensorBoard point stored, with its wall time", func() bool {
		s, _ := oh.st.MetricsTimed(t.Context(), task.ID, []string{"train/loss"})
		return len(s["train/loss"]) == 1 && s["train/loss"][0] == [3]float64{3, 0.25, 1_700_000_000_500}
	})
}

// files lists the regular files under dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// A retried attempt's ExecuteTask lists the newest version of every file of
// the earlier attempts, and of the run it resumes from where those lack a
// path; the master streams each on the worker's request, within the asked
// window, and refuses paths outside the list and stale fences.
func TestRestoreStreamsTheNewestFiles(t *testing.T) {
	oh := newOutputHarness(t, true, nil)
	ctx := context.Background()
	src := core.Task{ID: core.NewTaskID(), UserID: oh.owner.ID, Command: []string{"true"}, Attempt: 1}
	if err := oh.st.CreateTask(ctx, &src); err != nil {
		t.Fatal(err)
	}
	mod := time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC)
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	oh.seed(t, src.ID, 1, "only-in-source.txt", []byte("from the source run"), mod)
	oh.seed(t, src.ID, 1, "checkpoint.json", []byte(`{"episode":1}`), mod)
	task := core.Task{ID: core.NewTaskID(), UserID: oh.owner.ID, Command: []string{"true"}, Attempt: 1, MaxRetries: 3, ResumeFrom: src.ID}
	if err := oh.st.CreateTask(ctx, &task); err != nil {
		t.Fatal(err)
	}
	// Attempts 1 and 2 of the run itself, as if it was lost twice.
	oh.seed(t, task.ID, 1, "checkpoint.json", []byte(`{"episode":10}`), mod)
	oh.seed(t, task.ID, 1, "model.bin", []byte("old model"), mod)
	want := oh.seed(t, task.ID, 2, "model.bin", big, mod.Add(time.Second))
	oh.seed(t, task.ID, 3, "from-a-later-attempt", []byte("x"), mod) // never restored into attempt 3 itself
	task.Attempt = 3
	tk := oh.task(t, task.ID)
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	tk.Attempt = 3
	if err := oh.st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
	p := dial(t, oh.m.Addr())
	p.hello("w1", 2, 0)
	oh.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	for ex.TaskId != task.ID { // the source run is queued too
		if ex.Resume {
			t.Fatalf("the source run's first attempt resumes: %v", ex)
		}
		ex = p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	}
	if !ex.Resume || ex.Attempt != 3 {
		t.Fatalf("ExecuteTask of a retried attempt: resume %v attempt %d", ex.Resume, ex.Attempt)
	}
	var got []string
	for _, f := range ex.Restore {
		got = append(got, f.Path)
	}
	if strings.Join(got, ",") != "checkpoint.json,model.bin,only-in-source.txt" {
		t.Fatalf("restore list %v", got)
	}
	if f := ex.Restore[1]; f.Sha256 != want.SHA256 || f.Size != int64(len(big)) || f.ModifiedUnixNs != want.ModifiedAt.UnixNano() {
		t.Fatalf("model.bin to restore: %+v, want attempt 2's", f)
	}
	if f := ex.Restore[0]; f.Sha256 != sum([]byte(`{"episode":10}`)) {
		t.Fatalf("checkpoint.json to restore is not the run's own: %+v", f)
	}
	// The worker asks for model.bin 1 MiB at a time.
	var data []byte
	for !bytes.Equal(data, big) {
		p.send(&pb.ArtifactAck{TaskId: task.ID, Attempt: 3, Fence: ex.Fence, Path: "model.bin", Offset: uint64(len(data)), Window: 1 << 20, Restore: true})
		c := p.expect(&pb.ArtifactChunk{}).(*pb.ArtifactChunk)
		if !c.Restore || c.Path != "model.bin" || c.Offset != uint64(len(data)) || len(c.Data) > 1<<20 {
			t.Fatalf("restore chunk at %d: path %s offset %d, %d bytes", len(data), c.Path, c.Offset, len(c.Data))
		}
		data = append(data, c.Data...)
		if c.Last != (len(data) == len(big)) {
			t.Fatalf("last = %v at %d of %d", c.Last, len(data), len(big))
		}
	}
	p.send(&pb.ArtifactAck{TaskId: task.ID, Attempt: 3, Fence: ex.Fence, Path: "../../etc/passwd", Window: 1 << 20, Restore: true})
	if a := p.expect(&pb.ArtifactAck{}).(*pb.ArtifactAck); !a.Restore || !strings.Contains(a.Error, "not among the run's files") {
		t.Fatalf("a path not to restore: %+v", a)
	}
	p.send(&pb.ArtifactAck{TaskId: task.ID, Attempt: 3, Fence: ex.Fence + 1, Path: "model.bin", Window: 1 << 20, Restore: true})
	if a := p.expect(&pb.ArtifactAck{}).(*pb.ArtifactAck); a.Error != "fenced" {
		t.Fatalf("a stale fence: %+v", a)
	}
}

// startOutputWorker is startRealWorker syncing outputs every 200 ms.
func startOutputWorker(t *testing.T, id, addr string) *syncWriter {
	t.Helper()
	logs := &syncWriter{b: &strings.Builder{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Config{ID: id, Masters: []string{addr}, JoinToken: string(token),
			DataDir: t.TempDir(), Slots: 2, Grace: time.Second, Logger: zerolog.New(logs).With().Timestamp().Logger(),
			RunAs: worker.RunAsNone, ArtifactSync: 200 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop within 30 s")
		}
	})
	return logs
}

// A real worker uploads a run's output dir (regular files only: not its
// symbolic link, not its FIFO) before the run ends, reads its TensorBoard
// file into metrics, and a run resuming from it starts with its files and
// RLSCHED_RESUME=1.
func TestOutputsThroughARealWorker(t *testing.T) {
	oh := newOutputHarness(t, false, streamTimings)
	wlogs := startOutputWorker(t, "w-out", oh.m.Addr())
	events, err := filepath.Abs("../worker/tfevents/testdata/events.out.tfevents.pytorch-strict")
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
cd "$RLSCHED_OUTPUT_DIR"
echo '{"episode":10}' > checkpoint.json
mkdir -p tb/run1 sub
cp "$1" tb/run1/events.out.tfevents.1.host
head -c 3000000 /dev/zero | tr '\0' 'z' > sub/big.bin
ln -s /etc/passwd passwd-link
mkfifo fifo
echo "resume=${RLSCHED_RESUME:-unset}"
`
	task := oh.submit(t, 0, "sh", "-c", script, "sh", events)
	waitStatus(t, oh.harness, task.ID, core.StatusSucceeded, 60*time.Second)
	// TaskFinished waited for the last sync: everything is there now.
	rows, err := oh.st.Artifacts(t.Context(), task.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, r := range rows {
		paths = append(paths, r.Path)
	}
	if strings.Join(paths, ",") != "checkpoint.json,sub/big.bin,tb/run1/events.out.tfevents.1.host" {
		t.Fatalf("artifacts %v\nworker log:\n%s", paths, wlogs.String())
	}
	rc, err := oh.blobs.Open(t.Context(), rows[1].SHA256, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	big, _ := io.ReadAll(rc)
	rc.Close()
	if len(big) != 3000000 || bytes.Count(big, []byte("z")) != 3000000 {
		t.Fatalf("sub/big.bin stored as %d bytes", len(big))
	}
	series, err := oh.st.Metrics(t.Context(), task.ID, []string{"strict/foo"})
	if err != nil || len(series["strict/foo"]) != 100 || series["strict/foo"][1][0] != 5 {
		t.Fatalf("TensorBoard series: %d points, %v", len(series["strict/foo"]), err)
	}
	// The run's log: its line, and a line for each file not uploaded (when
	// a walk met it: before or after the run's own line).
	logged, err := os.ReadFile(filepath.Join(oh.dir, "logs", task.ID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"resume=unset\n",
		"[rlsched] not uploading fifo: not a regular file (a FIFO, socket or device)\n",
		"[rlsched] not uploading passwd-link: a symbolic link (never followed)\n"} {
		if n := strings.Count(string(logged), want); n != 1 {
			t.Fatalf("the run's log has %d times %q, want once:\n%s", n, want, logged)
		}
	}

	// A new run resumes from it.
	next := core.Task{ID: core.NewTaskID(), UserID: oh.owner.ID, Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(),
		ResumeFrom: task.ID, Command: []string{"sh", "-c", `cd "$RLSCHED_OUTPUT_DIR"; echo "resume=$RLSCHED_RESUME"; cat checkpoint.json; wc -c < sub/big.bin; ls tb/run1`}}
	if err := oh.st.CreateTask(t.Context(), &next); err != nil {
		t.Fatal(err)
	}
	oh.m.Notify()
	waitStatus(t, oh.harness, next.ID, core.StatusSucceeded, 60*time.Second)
	checkLog(t, oh.dir, next, []byte("resume=1\n{\"episode\":10}\n3000000\nevents.out.tfevents.1.host\n"))
	// Restored files are not sent back: the resumed run keeps none of its own.
	if rows, _ := oh.st.Artifacts(t.Context(), next.ID, 0); len(rows) != 0 {
		t.Fatalf("a resumed run uploaded its restored files again: %+v", rows)
	}
}

// A restore from S3 longer than one window: the stream's blob reader lives
// across the worker's requests.
func TestRestoreFromS3(t *testing.T) {
	srv := s3test.Start(t)
	blobs, err := s3.Open(t.Context(), s3.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey, Region: s3test.Region})
	if err != nil {
		t.Fatal(err)
	}
	oh := (&outputHarness{}).start(t, blobs, true, nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 20<<16) // 20 MiB
	task := core.Task{ID: core.NewTaskID(), UserID: oh.owner.ID, Command: []string{"true"}, Attempt: 1, MaxRetries: 3}
	if err := oh.st.CreateTask(t.Context(), &task); err != nil {
		t.Fatal(err)
	}
	oh.seed(t, task.ID, 1, "model.bin", big, time.Now())
	tk := oh.task(t, task.ID)
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	tk.Attempt = 2
	if err := oh.st.UpdateTask(t.Context(), &tk, exp); err != nil {
		t.Fatal(err)
	}
	p := dial(t, oh.m.Addr())
	p.hello("w1", 1, 0)
	oh.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if len(ex.Restore) != 1 {
		t.Fatalf("restore list %v", ex.Restore)
	}
	var data []byte
	for len(data) < len(big) {
		p.send(&pb.ArtifactAck{TaskId: task.ID, Attempt: 2, Fence: ex.Fence, Path: "model.bin", Offset: uint64(len(data)), Window: 8 << 20, Restore: true})
		for want := min(len(data)+8<<20, len(big)); len(data) < want; {
			m, err := p.read()
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case *pb.ArtifactChunk:
				if m.Offset != uint64(len(data)) {
					t.Fatalf("chunk at %d, want %d", m.Offset, len(data))
				}
				data = append(data, m.Data...)
			case *pb.ArtifactAck:
				t.Fatalf("restore refused at %d: %s", len(data), m.Error)
			}
		}
	}
	if !bytes.Equal(data, big) {
		t.Fatal("restored bytes differ")
	}
}
