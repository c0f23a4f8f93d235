package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/bench/internal/echo"
	"github.com/rlsched/rlsched/bench/internal/hist"
	"github.com/rlsched/rlsched/internal/testkit/s3test"
)

// artRun is one master (one artifact backend) under the artifacts load.
type artRun struct {
	name           string
	upload         time.Duration // from the file written to the run's end recorded (after its last sync)
	bps            float64
	base, during   latency
	hwm0, hwm1     int64 // the master's peak RSS before and after the upload
	cpu, workerCPU time.Duration
	stored         string // what the artifact list says
	// busyBase, busyDuring: the machine's cores busy in each window (of
	// all of them, /proc/stat), what the logs' latency rises with.
	busyBase, busyDuring float64
	// diskWritten: bytes the data dir's block device wrote during the
	// upload (/sys/dev/block/…/stat), -1 when unknown.
	diskWritten int64
}

type latency struct {
	p50, p99 time.Duration
	n        uint64
}

func latOf(h *hist.Hist) latency {
	return latency{h.QuantileDuration(0.5), h.QuantileDuration(0.99), h.Count()}
}

// runArtifacts uploads one checkpoint from a real `rlsched worker` (the run
// writes it and ends; its last sync sends it before TaskFinished) while W
// simulated runs stream logs to WebSocket subscribers, against the disk
// store and against S3 (SeaweedFS), beside raw loopback TCP and a plain
// PutObject of the same bytes measured in the same run.
func runArtifacts(e *env) (*report, error) {
	size := pick(e, int64(256<<20), int64(1<<30))
	w := pick(e, 20, 100)
	rate := pick(e, 50.0, 100.0) // lines/s per streaming run
	rep := &report{size: fmt.Sprintf("a %s checkpoint; %d simulated runs streaming %.0f lines/s each to as many WebSocket subscribers",
		mib(size), w, rate)}

	raw, err := echo.Stream(1, make([]byte, 1<<20), pick(e, time.Second, 3*time.Second))
	if err != nil {
		return nil, fmt.Errorf("raw loopback: %w", err)
	}
	e.logf("raw loopback TCP, one connection, 1 MiB writes: %.0f MB/s", raw/1e6)
	hashRate := sha256Rate(size)
	e.logf("sha256 on one core: %.0f MB/s", hashRate/1e6)
	diskRate, err := e.writeFsyncRate(size)
	if err != nil {
		return nil, err
	}
	e.logf("write + fsync of %s: %.0f MB/s", mib(size), diskRate/1e6)
	var runs []*artRun
	r, err := e.artifactsRun("disk (ARTIFACT_DIR)", nil, size, w, rate)
	if err != nil {
		return nil, err
	}
	runs = append(runs, r)
	// Issue 33 set the goal against the lower of the two ceilings one
	// file's upload into the disk store meets here; raw loopback does not
	// bind it, so its ratio is only shown.
	ceiling, ceilingName := hashRate, "sha256 on one core"
	if diskRate < hashRate {
		ceiling, ceilingName = diskRate, "the disk's fsynced write"
	}
	// A miss measures the disk once more, right after the upload: its rate
	// moves between measurements here, and the miss's note gives both.
	var diskAfter float64
	if r.bps < 0.9*ceiling {
		if diskAfter, err = e.writeFsyncRate(size); err != nil {
			return nil, err
		}
	}

	var put float64
	dir, err := e.dir("weed", false)
	if err != nil {
		return nil, err
	}
	srv, err := s3test.Run(context.Background(), dir)
	if err != nil {
		rep.note("S3 not measured: %v", err)
	} else {
		defer srv.Stop()
		if put, err = plainPut(srv, size); err != nil {
			return nil, err
		}
		e.logf("plain PutObject of %s to SeaweedFS: %.0f MB/s", mib(size), put/1e6)
		env := []string{"ARTIFACT_S3_ENDPOINT=" + srv.Endpoint, "ARTIFACT_S3_BUCKET=" + srv.Bucket, "ARTIFACT_S3_ACCESS_KEY=" + srv.AccessKey,
			"ARTIFACT_S3_SECRET_KEY=" + srv.SecretKey, "ARTIFACT_S3_REGION=" + s3test.Region}
		r, err := e.artifactsRun("S3 (SeaweedFS)", env, size, w, rate)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}

	t := rep.newTable("A checkpoint from a real worker into the store, while logs stream",
		"store", "upload", "MB/s", "ratio to raw loopback", "ratio to plain PutObject", "master CPU", "worker CPU",
		"logs p50 / p99 before", "logs p50 / p99 during", "p99 ratio", "master peak RSS before → after", "stored")
	for _, r := range runs {
		toPut := "–"
		if strings.HasPrefix(r.name, "S3") && put > 0 {
			toPut = ratioStr(r.bps, put)
		}
		t.add(r.name, ms(r.upload), human(r.bps/1e6), ratioStr(r.bps, raw), toPut, fmt.Sprintf("%.2f s", r.cpu.Seconds()),
			fmt.Sprintf("%.2f s", r.workerCPU.Seconds()), ms(r.base.p50)+" / "+ms(r.base.p99), ms(r.during.p50)+" / "+ms(r.during.p99),
			fmt.Sprintf("%.2f", float64(r.during.p99)/float64(max(r.base.p99, 1))), mib(r.hwm0)+" → "+mib(r.hwm1), r.stored)
	}
	ref := rep.newTable("References measured in the same run", "reference", "value")
	ref.add("raw loopback TCP, one connection writing 1 MiB blocks into a read-and-discard server", human(raw/1e6)+" MB/s")
	ref.add(fmt.Sprintf("writing the same %s into a file of the master's disk and fsyncing it", mib(size)), human(diskRate/1e6)+" MB/s")
	ref.add("sha256 of the same number of bytes on one core (the receiver hashes every byte once, on one goroutine per file)", human(hashRate/1e6)+" MB/s")
	if put > 0 {
		ref.add(fmt.Sprintf("plain PutObject of the same %s to the same SeaweedFS (minio-go, 16 MiB parts)", mib(size)), human(put/1e6)+" MB/s")
	}
	d := runs[0]
	rep.goal(d.bps >= 0.9*ceiling, "≥ 90%% of the lower of the two ceilings measured in the run (the disk's fsynced write and sha256 on one core), disk store: %.0f%% (%s of %s MB/s, the lower: %s)",
		100*d.bps/ceiling, human(d.bps/1e6), human(ceiling/1e6), ceilingName)
	if diskAfter > 0 {
		written := "not known (no block device's stat for the data dir)"
		if d.diskWritten >= 0 {
			written = fmt.Sprintf("%s (%.2f× the file)", mib(d.diskWritten), float64(d.diskWritten)/float64(size))
		}
		rep.note("The bound of the disk store's upload, measured: the data dir's disk wrote %s over the upload's %s, and the machine's %d cores were %.0f%% busy (the upload itself %.2f cores: the master's and the worker's CPU). The disk's fsynced write, the ceiling, measured %s MB/s before the upload and %s MB/s right after it: the upload reached %.0f%% of the one and %.0f%% of the other.",
			written, d.upload.Round(10*time.Millisecond), runtime.NumCPU(), 100*d.busyDuring, (d.cpu+d.workerCPU).Seconds()/d.upload.Seconds(),
			human(diskRate/1e6), human(diskAfter/1e6), 100*d.bps/diskRate, 100*d.bps/diskAfter)
	}
	if len(runs) > 1 && put > 0 {
		s := runs[1]
		rep.goal(s.bps >= 0.5*put, "≥ 50%% of a plain PutObject (S3): %.0f%% (%s of %s MB/s)", 100*s.bps/put, human(s.bps/1e6), human(put/1e6))
	}
	for _, r := range runs {
		rep.goal(r.during.p99 <= 2*r.base.p99, "%s: the logs' p99 write→subscriber latency at most 2× during the upload: %s → %s",
			r.name, ms(r.base.p99), ms(r.during.p99))
		if r.during.p99 > 2*r.base.p99 {
			rep.note("%s, the bound of the logs' rise: the machine's %d cores were %.0f%% busy before the upload and %.0f%% during it (/proc/stat), the upload itself taking %.2f cores (the master's and the worker's CPU over its %s; its threads niced, artifactpipe's Priority). The log pipe's wait is the cores' queue: the same lines through the same pipe, behind %.0f%% of the cores instead of %.0f%%.",
				r.name, runtime.NumCPU(), 100*r.busyBase, 100*r.busyDuring, (r.cpu+r.workerCPU).Seconds()/r.upload.Seconds(), r.upload.Round(10*time.Millisecond), 100*r.busyDuring, 100*r.busyBase)
		}
		rep.goal(r.hwm1-r.hwm0 < max(size/4, 128<<20), "%s: master memory bounded (no whole-file buffer; the rise under a quarter of the file, or 128 MiB): peak RSS %s → %s for a %s file",
			r.name, mib(r.hwm0), mib(r.hwm1), mib(size))
	}
	rep.note("Upload: from the moment the run printed that its file was written (it then exits) to the master's commit of its TaskFinished, which the worker sends only after the last sync of the run's output dir was stored and indexed: walk, read, ArtifactChunks of 1 MiB within the artifact window, the receiver's hash and write, the commit (disk: fsync and rename; S3: multipart upload of 16 MiB parts, then the server-side copy to the digest's key), the index row.")
	rep.note("Ceilings of one file's upload into the disk store on this machine, measured above: sha256 on one core (%s MB/s: the receiver hashes a file's bytes in order) and the disk's write bandwidth (%s MB/s: the file is made durable before it is indexed); the upload shares the cores with the copies on both sides and the other processes. Raw loopback TCP (%s MB/s), shown and not a goal since issue 33: the upload reached %.0f%% of it.",
		human(hashRate/1e6), human(diskRate/1e6), human(raw/1e6), 100*d.bps/raw)
	rep.note("Logs: %d simulated runs stream paced lines the whole time; p50/p99 are of the lines written in the 'before' window and in the upload window, as their WebSocket subscribers read them.", w)
	refName := map[bool]string{true: "fsynced_disk_write", false: "sha256_one_core"}[diskRate < hashRate]
	rep.result = result{metric: "upload_mb_per_s", value: d.bps / 1e6, unit: "MB/s", ref: refName, refValue: ceiling / 1e6}
	return rep, nil
}

// sha256Rate is how fast one core hashes n bytes, in bytes/s.
func sha256Rate(n int64) float64 {
	buf := make([]byte, 1<<20)
	h := sha256.New()
	began := time.Now()
	for left := n; left > 0; left -= int64(len(buf)) {
		h.Write(buf)
	}
	return float64(n) / time.Since(began).Seconds()
}

// writeFsyncRate writes n bytes into a new file under the harness's
// directory and fsyncs it, in bytes/s: the disk's bandwidth for a commit.
func (e *env) writeFsyncRate(n int64) (float64, error) {
	dir, err := e.dir("fsync", false)
	if err != nil {
		return 0, err
	}
	f, err := os.Create(filepath.Join(dir, "blob"))
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	defer f.Close()
	buf := make([]byte, 1<<20)
	began := time.Now()
	for left := n; left > 0; left -= int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// plainPut is a PutObject of size zero bytes to srv's bucket, in bytes/s.
func plainPut(srv *s3test.Server, size int64) (float64, error) {
	ctx := context.Background()
	began := time.Now()
	if _, err := srv.Client.PutObject(ctx, srv.Bucket, "bench-plain-put", io.LimitReader(zeros{}, size), size,
		minio.PutObjectOptions{PartSize: 16 << 20}); err != nil {
		return 0, fmt.Errorf("plain PutObject: %w", err)
	}
	bps := float64(size) / time.Since(began).Seconds()
	_ = srv.Client.RemoveObject(ctx, srv.Bucket, "bench-plain-put", minio.RemoveObjectOptions{})
	return bps, nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// artifactsRun measures one master: logs alone, then logs during the upload.
func (e *env) artifactsRun(name string, extra []string, size int64, w int, rate float64) (*artRun, error) {
	r := &artRun{name: name}
	rig, err := e.startLogRig("artifacts", extra, w, w)
	if err != nil {
		return nil, err
	}
	defer rig.stop()
	m, tok, g, subs := rig.m, rig.tok, rig.g, rig.subs
	// The real worker joins once every simulated one has its run, so the
	// checkpoint run is the only one it gets.
	wk, err := e.startArtifactWorker(m.rpc, rig.dataDir)
	if err != nil {
		return nil, err
	}
	defer wk.stop()
	if err := waitIdleWorkers(m.url, 1, 30*time.Second); err != nil {
		return nil, err
	}
	baseFor := pick(e, 3*time.Second, 10*time.Second)
	if err := g.stream(rate, baseFor+10*time.Minute); err != nil {
		return nil, err
	}
	time.Sleep(time.Second) // every stream running
	subs.begin()
	c0 := readCPUStat()
	time.Sleep(baseFor)
	r.base = latOf(subs.lat.Load())
	c1 := readCPUStat()
	r.busyBase = c0.busyTo(c1)
	_, r.hwm0 = m.mem()

	subs.begin()
	label := "artifacts-upload-" + strings.Fields(name)[0]
	m.profile(label, true)
	s0, w0 := sample(m.pid()), sample(wk.cmd.Process.Pid)
	c0 = readCPUStat()
	d0 := deviceWritten(rig.dataDir)
	script := fmt.Sprintf(`head -c %d /dev/zero > "$RLSCHED_OUTPUT_DIR/ckpt.bin" && echo written $(date +%%s%%N)`, size)
	id, err := submitRun(m.url, tok, []string{"/bin/sh", "-c", script})
	if err != nil {
		return nil, err
	}
	finished, err := waitSucceeded(m.url, tok, id, 10*time.Minute)
	if err != nil {
		return nil, err
	}
	s1, w1 := sample(m.pid()), sample(wk.cmd.Process.Pid)
	r.busyDuring = c0.busyTo(readCPUStat())
	r.diskWritten = -1
	if d1 := deviceWritten(rig.dataDir); d0 >= 0 && d1 >= d0 {
		r.diskWritten = d1 - d0
	}
	m.profile(label, false)
	r.during = latOf(subs.lat.Load())
	_, r.hwm1 = m.mem()
	r.cpu, r.workerCPU = s0.cpuTo(s1), w0.cpuTo(w1)
	written, err := writtenAt(m.url, tok, id)
	if err != nil {
		return nil, err
	}
	r.upload = finished.Sub(written)
	r.bps = float64(size) / r.upload.Seconds()
	if r.stored, err = checkStored(m.url, tok, id, size); err != nil {
		return nil, err
	}
	e.logf("%s: %s in %v (%.0f MB/s); logs p99 %v → %v; master CPU %v, worker CPU %v; peak RSS %s → %s",
		name, mib(size), r.upload.Round(time.Millisecond), r.bps/1e6, r.base.p99, r.during.p99,
		r.cpu.Round(time.Millisecond), r.workerCPU.Round(time.Millisecond), mib(r.hwm0), mib(r.hwm1))
	return r, nil
}

// benchProc is a helper process the harness started.
type benchProc struct{ cmd *exec.Cmd }

func (p *benchProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// startArtifactWorker runs a real worker with one slot whose runs sync
// only at their end (ARTIFACT_SYNC_SECONDS=3600).
func (e *env) startArtifactWorker(rpc, dataDir string) (*benchProc, error) {
	bin, err := e.rlschedBin()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "worker", "--master", rpc, "--id", "bench-artifacts", "--slots", "1", "--gpus", "0",
		"--data-dir", filepath.Join(dataDir, "worker"))
	// RUN_AS=none: the worker's data dir is inside the master's (0700).
	cmd.Env = append(os.Environ(), "WORKER_JOIN_TOKEN="+benchJoinToken, "LOG_FORMAT=json", "RUN_AS=none", "ARTIFACT_SYNC_SECONDS=3600")
	logf, err := os.Create(filepath.Join(e.tmp, fmt.Sprintf("worker-artifacts-%d.log", time.Now().UnixNano())))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := e.start(cmd); err != nil {
		return nil, fmt.Errorf("cannot start rlsched worker: %w", err)
	}
	return &benchProc{cmd: cmd}, nil
}

func authGet(url, tok string, hdr ...string) ([]byte, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, err
}

func submitRun(base, tok string, argv []string) (string, error) {
	body, _ := json.Marshal(map[string]any{"command": argv, "maxRetries": 0})
	req, _ := http.NewRequest(http.MethodPost, base+"/api/train", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("POST /api/train: HTTP %d %v", resp.StatusCode, err)
	}
	return out.ID, nil
}

// waitSucceeded polls the run and returns its finishedAt.
func waitSucceeded(base, tok, id string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := authGet(base+"/api/tasks/"+id, tok)
		if err != nil {
			return time.Time{}, err
		}
		var tk struct {
			Status     string
			Error      string
			FinishedAt *time.Time
		}
		_ = json.Unmarshal(b, &tk)
		switch {
		case tk.Status == "SUCCEEDED" && tk.FinishedAt != nil:
			return *tk.FinishedAt, nil
		case tk.Status == "FAILED" || tk.Status == "CANCELLED" || tk.Status == "TIMEOUT":
			return time.Time{}, fmt.Errorf("the checkpoint run ended %s: %s", tk.Status, tk.Error)
		case time.Now().After(deadline):
			return time.Time{}, fmt.Errorf("the checkpoint run is still %s after %v", tk.Status, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writtenAt reads the time the run printed after writing its file.
func writtenAt(base, tok, id string) (time.Time, error) {
	b, err := authGet(base+"/api/monitor/logs/"+id+"?offset=0", tok, "Accept", "text/plain")
	if err != nil {
		return time.Time{}, err
	}
	i := bytes.Index(b, []byte("written "))
	if i < 0 {
		return time.Time{}, fmt.Errorf("the checkpoint run's log lacks its time: %q", b)
	}
	ns, err := strconv.ParseInt(string(bytes.Fields(b[i+len("written "):])[0]), 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, ns), nil
}

// checkStored compares the run's artifact with the bytes it wrote.
func checkStored(base, tok, id string, size int64) (string, error) {
	b, err := authGet(base+"/api/tasks/"+id+"/artifacts", tok)
	if err != nil {
		return "", err
	}
	var l struct {
		Items []struct {
			Path   string
			Size   int64
			SHA256 string
		}
	}
	_ = json.Unmarshal(b, &l)
	h := sha256.New()
	_, _ = io.Copy(h, io.LimitReader(zeros{}, size))
	want := hex.EncodeToString(h.Sum(nil))
	if len(l.Items) != 1 || l.Items[0].Path != "ckpt.bin" || l.Items[0].Size != size || l.Items[0].SHA256 != want {
		return "WRONG: " + string(b), nil
	}
	return "ok (size and sha256)", nil
}

// cpuStat is /proc/stat's first line: the machine's busy and total jiffies.
type cpuStat struct{ busy, total uint64 }

func readCPUStat() cpuStat {
	b, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	var c cpuStat
	// user nice system idle iowait irq softirq steal; guest time is
	// counted in user already.
	for i, v := range f[min(1, len(f)):min(9, len(f))] {
		n, _ := strconv.ParseUint(v, 10, 64)
		c.total += n
		if i != 3 && i != 4 { // idle, iowait
			c.busy += n
		}
	}
	return c
}

// busyTo is the share of the cores busy from c to d.
func (c cpuStat) busyTo(d cpuStat) float64 {
	if d.total <= c.total {
		return 0
	}
	return float64(d.busy-c.busy) / float64(d.total-c.total)
}

// deviceWritten is the bytes the block device holding dir has written
// since boot (the stat file's sectors written, in 512-byte units); -1 when
// unknown.
func deviceWritten(dir string) int64 {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return -1
	}
	n, err := strconv.ParseInt(f[6], 10, 64)
	if err != nil {
		return -1
	}
	return n * 512
}
