package artifactpipe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/artifact/disk"
	"github.com/rlsched/rlsched/artifact/s3"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/s3test"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// acks collects the answers of one connection.
type acks chan Ack

func (a acks) ArtifactAcked(x Ack) { a <- x }

func (a acks) next(t *testing.T) Ack {
	t.Helper()
	select {
	case x := <-a:
		return x
	case <-time.After(30 * time.Second):
		t.Fatal("no ack within 30 s")
		return Ack{}
	}
}

type env struct {
	st    store.Store
	blobs artifact.Store
	dir   string
}

// newEnv is a store with runs r1 and r2 and a disk blob store.
func newEnv(t *testing.T) *env {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := st.CreateUser(t.Context(), &u); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"r1", "r2"} {
		if err := st.CreateTask(t.Context(), &core.Task{ID: id, UserID: u.ID, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "artifacts")
	blobs, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &env{st: st, blobs: blobs, dir: dir}
}

func (e *env) pipe(t *testing.T, mod func(*Config)) *Pipe {
	t.Helper()
	cfg := Config{Blobs: e.blobs, Index: e.st, Writers: 2}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n)})
	_, _ = r.Read(b)
	return b
}

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// send submits data[from:] of a version in chunks of size step, waiting for
// each ack, and returns the last ack.
func send(t *testing.T, p *Pipe, a acks, task, path string, data []byte, from, step int, mod int64) Ack {
	t.Helper()
	var last Ack
	for off := from; ; off += step {
		end := min(off+step, len(data))
		c := Chunk{TaskID: task, Attempt: 1, Path: path, Size: int64(len(data)), ModNs: mod, Offset: uint64(off),
			Data: bytes.Clone(data[off:end]), Last: end == len(data), Ack: a}
		if !p.Submit(c) {
			t.Fatalf("Submit at %d: busy", off)
		}
		last = a.next(t)
		if last.Err != "" || last.Done || end == len(data) {
			return last
		}
		if last.Offset != uint64(end) {
			t.Fatalf("ack after %d bytes: offset %d", end, last.Offset)
		}
	}
}

func (e *env) readBlob(t *testing.T, sum string) []byte {
	t.Helper()
	rc, err := e.blobs.Open(t.Context(), sum, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *env) row(t *testing.T, task, path string) core.Artifact {
	t.Helper()
	a, err := e.st.Artifact(t.Context(), task, path, 1)
	if err != nil {
		t.Fatalf("Artifact(%s, %s): %v", task, path, err)
	}
	return a
}

// A file of many chunks and one of one chunk are stored and indexed, with
// their digests, sizes and mtimes; nothing stays in the staging dir.
func TestStore(t *testing.T) {
	e := newEnv(t)
	p := e.pipe(t, nil)
	a := make(acks, 16)
	big := randBytes(5<<20 + 123)
	mod := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC).UnixNano()
	if last := send(t, p, a, "r1", "ckpt/model.bin", big, 0, 1<<20, mod); !last.Done || last.Offset != uint64(len(big)) {
		t.Fatalf("last ack of a 5 MiB file: %+v", last)
	}
	r := e.row(t, "r1", "ckpt/model.bin")
	if r.SHA256 != sumOf(big) || r.Size != int64(len(big)) || r.ModifiedAt.UnixNano() != mod {
		t.Fatalf("row %+v, want sha %s size %d", r, sumOf(big), len(big))
	}
	if got := e.readBlob(t, r.SHA256); !bytes.Equal(got, big) {
		t.Fatal("the stored blob differs from the file")
	}
	if last := send(t, p, a, "r1", "checkpoint.json", []byte(`{"episode":10}`), 0, 1<<20, mod); !last.Done {
		t.Fatalf("one-chunk file: %+v", last)
	}
	if r := e.row(t, "r1", "checkpoint.json"); r.Size != 14 {
		t.Fatalf("one-chunk row: %+v", r)
	}
	// An empty file is a file.
	if last := send(t, p, a, "r1", "empty", nil, 0, 1<<20, mod); !last.Done {
		t.Fatalf("empty file: %+v", last)
	}
	if left, _ := os.ReadDir(filepath.Join(e.dir, "tmp")); len(left) != 0 {
		t.Fatalf("staging dir not empty: %v", left)
	}
	// The same version again is answered done at once (a lost ack).
	c := Chunk{TaskID: "r1", Attempt: 1, Path: "ckpt/model.bin", Size: int64(len(big)), ModNs: mod, Offset: 4 << 20, Data: big[4<<20 : 5<<20], Ack: a}
	if !p.Submit(c) {
		t.Fatal("busy")
	}
	if x := a.next(t); !x.Done || x.Offset != uint64(len(big)) {
		t.Fatalf("a stored version resent: %+v", x)
	}
}

// Gaps, duplicates and a new version in the middle of an upload.
func TestOffsets(t *testing.T) {
	e := newEnv(t)
	p := e.pipe(t, nil)
	a := make(acks, 16)
	data := randBytes(3 << 20)
	chunk := func(off, n int, mod int64, last bool) Ack {
		t.Helper()
		if !p.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "f", Size: int64(len(data)), ModNs: mod, Offset: uint64(off),
			Data: data[off : off+n], Last: last, Ack: a}) {
			t.Fatal("busy")
		}
		return a.next(t)
	}
	if x := chunk(0, 1<<20, 1, false); x.Offset != 1<<20 || x.Err != "" {
		t.Fatalf("first chunk: %+v", x)
	}
	if x := chunk(2<<20, 1<<20, 1, true); x.Err != ErrGap || x.Offset != 1<<20 {
		t.Fatalf("a chunk past the end: %+v, want gap at 1 MiB", x)
	}
	if x := chunk(512<<10, 1<<20, 1, false); x.Err != "" || x.Offset != 1536<<10 {
		t.Fatalf("an overlapping chunk: %+v", x)
	}
	if x := chunk(0, 1<<20, 1, false); x.Err != "" || x.Offset != 1536<<10 {
		t.Fatalf("a duplicate: %+v", x)
	}
	// Another version of the path: the first is dropped, this one starts at 0.
	if x := chunk(1<<20, 1<<20, 2, false); x.Err != ErrGap || x.Offset != 0 {
		t.Fatalf("a new version resumed past 0: %+v", x)
	}
	if left, _ := filepath.Glob(filepath.Join(e.dir, "tmp", "up-*-1")); len(left) != 0 {
		t.Fatalf("the old version's staging file stays: %v", left)
	}
	if last := send(t, p, a, "r1", "f", data, 0, 1<<20, 2); !last.Done {
		t.Fatalf("%+v", last)
	}
	if r := e.row(t, "r1", "f"); r.SHA256 != sumOf(data) || r.ModifiedAt.UnixNano() != 2 {
		t.Fatalf("row %+v", r)
	}
}

// An upload begun through one master resumes through another that shares
// the directory: from what the first one staged, rehashed.
func TestResumeOnAnotherMaster(t *testing.T) {
	e := newEnv(t)
	p1 := e.pipe(t, nil)
	a1 := make(acks, 16)
	data := randBytes(4 << 20)
	for off := 0; off < 2<<20; off += 1 << 20 {
		p1.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "m", Size: int64(len(data)), ModNs: 7, Offset: uint64(off), Data: data[off : off+1<<20], Ack: a1})
		a1.next(t)
	}
	// While the first master holds it, the second is told to wait.
	p2 := e.pipe(t, nil)
	a2 := make(acks, 16)
	p2.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "m", Size: int64(len(data)), ModNs: 7, Offset: 2 << 20, Data: data[2<<20 : 3<<20], Ack: a2})
	if x := a2.next(t); x.Err != ErrBusy {
		t.Fatalf("an upload another master holds: %+v, want busy", x)
	}
	p1.Detach(a1) // its connection closed
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		p2.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "m", Size: int64(len(data)), ModNs: 7, Offset: 3 << 20, Data: data[3<<20:], Last: true, Ack: a2})
		x := a2.next(t)
		if x.Err == ErrGap && x.Offset == 2<<20 {
			return true, ""
		}
		if x.Err != ErrBusy {
			t.Fatalf("resume on another master: %+v, want gap at 2 MiB", x)
		}
		return false, "the other master still holds the upload"
	})
	if last := send(t, p2, a2, "r1", "m", data, 2<<20, 1<<20, 7); !last.Done {
		t.Fatalf("%+v", last)
	}
	if r := e.row(t, "r1", "m"); r.SHA256 != sumOf(data) {
		t.Fatalf("a resumed upload's digest: %+v", r)
	}
}

func warnings(t *testing.T, e *env, id string) []core.Warning {
	t.Helper()
	tk, err := e.st.Task(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tk.Warnings
}

// Files over the limits are refused at their first chunk, the run gets one
// warning per cause, and other runs are not affected.
func TestLimits(t *testing.T) {
	e := newEnv(t)
	p := e.pipe(t, func(c *Config) { c.MaxFileBytes, c.MaxRunBytes, c.MaxRunFiles = 1<<20, 3<<20, 5 })
	a := make(acks, 16)
	// A 5 GiB file: refused before a byte is written.
	p.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "huge.bin", Size: 5 << 30, ModNs: 1, Data: randBytes(1 << 20), Ack: a})
	if x := a.next(t); !strings.HasPrefix(x.Err, "refused: huge.bin (5.0 GiB) is over ARTIFACT_MAX_FILE_BYTES (1.0 MiB)") {
		t.Fatalf("a file over the limit: %+v", x)
	}
	for i := range 8 {
		x := send(t, p, a, "r1", fmt.Sprintf("small/%d", i), []byte("x"), 0, 10, 1)
		if (i < 5) != x.Done {
			t.Fatalf("file %d of a run that keeps 5: %+v", i, x)
		}
		if i >= 5 && !strings.HasPrefix(x.Err, "refused: the run keeps at most 5 files") {
			t.Fatalf("file %d: %+v", i, x)
		}
	}
	ws := warnings(t, e, "r1")
	if len(ws) != 2 || ws[0].Code != core.WarnArtifactLimit || ws[1].Code != core.WarnArtifactLimit ||
		!strings.Contains(ws[1].Message, "small/5 and every later new file") {
		t.Fatalf("warnings: %+v, want one for the size and one for the count", ws)
	}
	// Bytes: r2 may keep 3 MiB; a new version of a file replaces its size.
	one := randBytes(1 << 20)
	for i, want := range []bool{true, true, true, false} {
		x := send(t, p, a, "r2", fmt.Sprintf("b%d", i), one, 0, 1<<20, 1)
		if x.Done != want {
			t.Fatalf("MiB %d of a run that keeps 3: %+v", i, x)
		}
	}
	if x := send(t, p, a, "r2", "b0", one[:1000], 0, 1<<20, 2); !x.Done {
		t.Fatalf("a smaller new version of a kept file: %+v", x)
	}
	if x := send(t, p, a, "r2", "b3", one[:1000], 0, 1<<20, 2); !x.Done {
		t.Fatalf("a file that fits once b0 shrank: %+v", x)
	}
	if ws := warnings(t, e, "r2"); len(ws) != 1 || !strings.Contains(ws[0].Message, "ARTIFACT_MAX_RUN_BYTES") {
		t.Fatalf("r2's warnings: %+v", ws)
	}
}

// fullDisk is the disk store of a master whose disk is full: every commit
// meets ENOSPC (the hardware condition is the stand-in; the bytes still go
// through the real store's code up to there).
type fullDisk struct{ *disk.Store }

func (f fullDisk) Put(ctx context.Context, r io.Reader, size int64) (artifact.Blob, error) {
	_, _ = io.Copy(io.Discard, r)
	return artifact.Blob{}, fmt.Errorf("cannot store the artifact: write /x: %w", syscall.ENOSPC)
}

func (f fullDisk) Adopt(ctx context.Context, fl *os.File, b artifact.Blob) error {
	fl.Close()
	os.Remove(fl.Name())
	return fmt.Errorf("cannot flush the artifact to disk: %w", syscall.ENOSPC)
}

// A full disk refuses the files, says so on the run, and the pipe goes on.
func TestFullDisk(t *testing.T) {
	e := newEnv(t)
	p := e.pipe(t, func(c *Config) { c.Blobs = fullDisk{e.blobs.(*disk.Store)} })
	a := make(acks, 16)
	x := send(t, p, a, "r1", "ckpt", randBytes(3<<20), 0, 1<<20, 1)
	if !strings.HasPrefix(x.Err, "failed: the master's disk is full") {
		t.Fatalf("a commit on a full disk: %+v", x)
	}
	if x := send(t, p, a, "r1", "small", []byte("x"), 0, 10, 1); !strings.HasPrefix(x.Err, "failed:") {
		t.Fatalf("a one-chunk file on a full disk: %+v", x)
	}
	ws := warnings(t, e, "r1")
	if len(ws) != 2 || ws[0].Code != core.WarnArtifactError || !strings.Contains(ws[0].Message, "cannot store ckpt: the master's disk is full") {
		t.Fatalf("warnings: %+v", ws)
	}
	if _, err := e.st.Artifact(t.Context(), "r1", "ckpt", 1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a file that was not stored is indexed: %v", err)
	}
}

// A full queue refuses at once, and takes chunks again once drained.
func TestBusy(t *testing.T) {
	e := newEnv(t)
	p := e.pipe(t, func(c *Config) { c.QueueBytes = 1 << 20 })
	a := make(acks, 64)
	data := randBytes(1 << 20)
	ok := 0
	for range 32 {
		if p.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "f", Size: 64 << 20, ModNs: 1, Data: data, Ack: a}) {
			ok++
		}
	}
	if ok == 32 {
		t.Fatal("32 MiB went into a 1 MiB queue")
	}
	if w := p.Window(); w != MinWindow {
		t.Fatalf("window %d, want at least one chunk", w)
	}
}

// The S3 store does not stage: a long file streams into Put, and another
// master resumes nothing (gap at 0) but stores it all the same.
func TestS3Stream(t *testing.T) {
	srv := s3test.Start(t)
	blobs, err := s3.Open(t.Context(), s3.Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey, Region: s3test.Region})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	e.blobs = blobs
	p1 := e.pipe(t, nil)
	a1 := make(acks, 16)
	data := randBytes(3 << 20)
	p1.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "m", Size: int64(len(data)), ModNs: 1, Data: data[:1<<20], Ack: a1})
	a1.next(t)
	p1.Detach(a1)
	p2 := e.pipe(t, nil)
	a2 := make(acks, 16)
	p2.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "m", Size: int64(len(data)), ModNs: 1, Offset: 1 << 20, Data: data[1<<20 : 2<<20], Ack: a2})
	if x := a2.next(t); x.Err != ErrGap || x.Offset != 0 {
		t.Fatalf("resume through another master on S3: %+v, want gap at 0", x)
	}
	if last := send(t, p2, a2, "r1", "m", data, 0, 1<<20, 1); !last.Done {
		t.Fatalf("%+v", last)
	}
	r := e.row(t, "r1", "m")
	if r.SHA256 != sumOf(data) || !bytes.Equal(e.readBlob(t, r.SHA256), data) {
		t.Fatalf("S3 blob: %+v", r)
	}
	if n := p1.streams.Load() + p2.streams.Load(); n != 0 {
		t.Fatalf("%d streams left open", n)
	}
}

// BenchmarkStagedUpload streams one 256 MiB file through the receiver into
// the disk store (staged, hashed, adopted with its fsync), keeping 16 MiB
// of chunks ahead of the acks as a worker does.
func BenchmarkStagedUpload(b *testing.B) {
	const size, chunk, window = 256 << 20, 1 << 20, 16
	data := make([]byte, chunk)
	b.SetBytes(size)
	b.ReportAllocs()
	for i := range b.N {
		b.StopTimer()
		e := newBenchEnv(b)
		p, err := New(Config{Blobs: e.blobs, Index: e.st})
		if err != nil {
			b.Fatal(err)
		}
		a := make(acks, window+1)
		b.StartTimer()
		sent, acked := 0, 0
		for acked < size/chunk {
			for sent < size/chunk && sent-acked < window {
				c := Chunk{TaskID: "r1", Attempt: 1, Path: "big", Size: size, ModNs: int64(i), Offset: uint64(sent * chunk),
					Data: data, Last: sent == size/chunk-1, Ack: a}
				for !p.Submit(c) {
				}
				sent++
			}
			x := <-a
			if x.Err != "" {
				b.Fatal(x.Err)
			}
			acked++
		}
		b.StopTimer()
		p.Close()
	}
}

// newBenchEnv is newEnv for a benchmark.
func newBenchEnv(b *testing.B) *env {
	b.Helper()
	st, err := sqlite.Open(filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	u := core.User{Username: "alice", PasswordHash: "h"}
	if err := st.CreateUser(b.Context(), &u); err != nil {
		b.Fatal(err)
	}
	if err := st.CreateTask(b.Context(), &core.Task{ID: "r1", UserID: u.ID, Attempt: 1}); err != nil {
		b.Fatal(err)
	}
	blobs, err := disk.Open(filepath.Join(b.TempDir(), "artifacts"))
	if err != nil {
		b.Fatal(err)
	}
	return &env{st: st, blobs: blobs}
}

// TestRefusesMoreThanAnnounced (issue 25): the limits are checked against
// a file's announced size, so an upload that sends past it (a rogue
// worker's) is refused and nothing of it is kept.
func TestRefusesMoreThanAnnounced(t *testing.T) {
	e := newEnv(t)
	p := e.pipe(t, func(c *Config) { c.MaxFileBytes, c.MaxRunBytes = 1<<20, 1<<20 })
	a := make(acks, 16)
	data := randBytes(3 << 19) // 1.5 MiB behind an announced 10 bytes
	var last Ack
	for off := 0; off < len(data); off += 1 << 18 {
		end := min(off+1<<18, len(data))
		p.Submit(Chunk{TaskID: "r1", Attempt: 1, Path: "small.bin", Size: 10, ModNs: 1, Offset: uint64(off),
			Data: bytes.Clone(data[off:end]), Last: end == len(data), Ack: a})
		if last = a.next(t); last.Err != "" {
			break
		}
	}
	if !strings.Contains(last.Err, "more than the 10 bytes it announced") {
		t.Fatalf("an upload past its announced size: %+v", last)
	}
	if _, err := e.st.Artifact(t.Context(), "r1", "small.bin", 1); err == nil {
		t.Fatal("the oversized upload was indexed")
	}
}

// TestUserAndTotalCaps (issue 25): what all of a user's runs keep is
// bounded (MaxUserBytes), rows another master indexed included, and so is
// what every run keeps (MaxTotalBytes); a refused file names its owner's
// standing, warns the run once, and another user still stores.
func TestUserAndTotalCaps(t *testing.T) {
	e := newEnv(t)
	bob := core.User{Username: "bob", PasswordHash: "h"}
	if err := e.st.CreateUser(t.Context(), &bob); err != nil {
		t.Fatal(err)
	}
	if err := e.st.CreateTask(t.Context(), &core.Task{ID: "b1", UserID: bob.ID, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	// 1 MiB of alice's, stored before this master started.
	if err := e.st.PutArtifact(t.Context(), core.Artifact{TaskID: "r1", Attempt: 1, Path: "old.bin", Size: 1 << 20,
		SHA256: sumOf(nil), ModifiedAt: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	p := e.pipe(t, func(c *Config) { c.MaxUserBytes, c.MaxTotalBytes = 2<<20, 3<<20 })
	a := make(acks, 16)
	half := randBytes(1 << 19)
	for i, want := range []bool{true, true, false} {
		x := send(t, p, a, "r2", fmt.Sprintf("h%d", i), half, 0, 1<<18, 1)
		if x.Done != want {
			t.Fatalf("half MiB %d of alice's, who keeps 1 of 2 MiB: %+v", i, x)
		}
		if !want && x.Err != "refused: artifact h2 not stored: user alice is at 2.0 MiB of 2.0 MiB (ARTIFACT_MAX_MB_PER_USER); ask an admin to raise it" {
			t.Fatalf("refusal: %q", x.Err)
		}
	}
	// A smaller version of one of her files makes room, in the same run.
	if x := send(t, p, a, "r2", "h0", half[:10], 0, 1<<18, 2); !x.Done {
		t.Fatalf("a smaller new version: %+v", x)
	}
	if x := send(t, p, a, "r2", "h3", half[:1000], 0, 1<<18, 1); !x.Done {
		t.Fatalf("a file that fits once h0 shrank: %+v", x)
	}
	if ws := warnings(t, e, "r2"); len(ws) != 1 || ws[0].Code != core.WarnArtifactLimit || !strings.Contains(ws[0].Message, "user alice is at") {
		t.Fatalf("r2's warnings: %+v", ws)
	}
	if ws := warnings(t, e, "r1"); len(ws) != 0 {
		t.Fatalf("r1's warnings: %+v", ws)
	}
	// Bob has his own 2 MiB, but the server keeps at most 3 MiB in all.
	one := randBytes(1 << 20)
	for i, want := range []bool{true, false} {
		x := send(t, p, a, "b1", fmt.Sprintf("m%d", i), one, 0, 1<<20, 1)
		if x.Done != want {
			t.Fatalf("MiB %d of bob's: %+v", i, x)
		}
		if !want && !strings.HasPrefix(x.Err, "refused: artifact m1 not stored: this server keeps 2.5 MiB of runs' outputs, its limit is 3.0 MiB (ARTIFACT_MAX_MB)") {
			t.Fatalf("refusal: %q", x.Err)
		}
	}
	if got, err := e.st.ArtifactBytes(t.Context(), bob.ID); err != nil || got != 1<<20 {
		t.Fatalf("bob keeps %d, %v", got, err)
	}
}
