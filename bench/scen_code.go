package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/worker/codecache"
)

// runCode measures code snapshots (issue 27): `rlsched submit --code DIR`
// of a 2,000-file, 20 MB tree against a real master, first (every file
// uploaded) and again with one file changed (one blob and the manifest);
// and on the worker's side, in process, making an attempt's copy of a tree
// the cache holds (codecache.Materialize) beside a cold extract of it (the
// blobs fetched into the cache, then the copy).
func runCode(e *env) (*report, error) {
	files := pick(e, 500, 2000)
	const fileSize = 10 << 10 // 2,000 × 10 KiB ≈ 20 MB
	repeats := pick(e, 3, 5)
	rep := &report{size: fmt.Sprintf("%s files × 10 KiB (%s MB); median of %d", human(float64(files)), human(float64(files*fileSize)/1e6), repeats)}
	dataDir, err := e.dir("code", false)
	if err != nil {
		return nil, err
	}
	src := filepath.Join(dataDir, "tree")
	rng := rand.New(rand.NewPCG(27, 1))
	content := map[string][]byte{}
	for i := range files {
		p := fmt.Sprintf("pkg%02d/mod%04d.py", i%40, i)
		b := make([]byte, fileSize)
		for j := range b {
			b[j] = byte('a' + rng.IntN(26))
		}
		content[p] = b
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(src, p), b, 0o644); err != nil {
			return nil, err
		}
	}

	// The submissions, through the CLI as a user runs it.
	m, err := e.startMaster(masterConf{name: "code", dataDir: filepath.Join(dataDir, "master")})
	if err != nil {
		return nil, err
	}
	defer func() { _ = m.stop() }()
	tok, err := m.login()
	if err != nil {
		return nil, err
	}
	bin, err := e.rlschedBin()
	if err != nil {
		return nil, err
	}
	submit := func() (time.Duration, error) {
		cmd := exec.Command(bin, "submit", "--server", m.url, "--code", src, "--", "/bin/true")
		cmd.Env = append(os.Environ(), "RLSCHED_TOKEN="+tok, "RLSCHED_CONFIG_DIR="+filepath.Join(dataDir, "cli"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		d := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("rlsched submit --code: %v\n%s", err, out.String())
		}
		return d, nil
	}
	first, err := submit()
	if err != nil {
		return nil, err
	}
	e.logf("first submit: %v", first)
	var again []time.Duration
	for i := range repeats {
		p := filepath.Join(src, "pkg00/mod0000.py")
		if err := os.WriteFile(p, append(content["pkg00/mod0000.py"], []byte("# edit "+strconv.Itoa(i)+"\n")...), 0o644); err != nil {
			return nil, err
		}
		d, err := submit()
		if err != nil {
			return nil, err
		}
		again = append(again, d)
	}
	slices.Sort(again)
	resubmit := again[len(again)/2]
	e.logf("resubmit with one change: %v", resubmit)

	// The worker's cache, in process.
	var man codetree.Manifest
	blobs := &memBlobs{b: map[string][]byte{}}
	for p, b := range content {
		s := sha256.Sum256(b)
		sum := hex.EncodeToString(s[:])
		man.Files = append(man.Files, codetree.File{Path: p, Mode: codetree.ModeFile, Size: int64(len(b)), SHA256: sum})
		blobs.b[sum] = b
	}
	slices.SortFunc(man.Files, func(a, b codetree.File) int { return strings.Compare(a.Path, b.Path) })
	enc := man.Encode()
	tree := codetree.Hash(enc)
	blobs.b[tree] = enc
	var pack []byte // as the master serves a tree's pack (codetree.PackSuffix)
	for _, pb := range codetree.Pack(&man) {
		pack = append(pack, blobs.b[pb.SHA256]...)
	}
	blobs.b[tree+codetree.PackSuffix] = pack
	var cold, warm []time.Duration
	for i := range repeats {
		c, err := codecache.Open(filepath.Join(dataDir, "cache-"+strconv.Itoa(i)), 1<<40, zerolog.Nop())
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		t, err := c.Acquire(tree, blobs)
		if err != nil {
			return nil, err
		}
		if _, err := c.Materialize(t, filepath.Join(dataDir, fmt.Sprintf("cold-%d", i)), nil); err != nil {
			return nil, err
		}
		cold = append(cold, time.Since(t0))
		c.Release(tree)
		// A new attempt of the same tree: cached, only its copy made.
		owner := &codecache.Owner{UID: 61999, GID: 61999, Link: true}
		if os.Geteuid() != 0 {
			owner = nil
		}
		t0 = time.Now()
		t, err = c.Acquire(tree, blobs)
		if err != nil {
			return nil, err
		}
		if _, err := c.Materialize(t, filepath.Join(dataDir, fmt.Sprintf("warm-%d", i)), owner); err != nil {
			return nil, err
		}
		warm = append(warm, time.Since(t0))
		c.Release(tree)
	}
	slices.Sort(cold)
	slices.Sort(warm)
	coldD, warmD := cold[len(cold)/2], warm[len(warm)/2]
	e.logf("cold extract %v, cached copy %v", coldD, warmD)
	how := "hard links (as root, for a run's own uid)"
	if os.Geteuid() != 0 {
		how = "copies (not root: the worker's own uid)"
	}

	plain, coldEnv, warmEnv, err := envStarts(e, m, tok, dataDir, repeats)
	if err != nil {
		return nil, err
	}
	e.logf("start after submit: plain %v, first env %v, warm env %v", plain, coldEnv, warmEnv)

	t := rep.newTable("Code snapshots (real master, SQLite on disk; worker cache in process)", "what", "time")
	t.add(fmt.Sprintf("`rlsched submit --code` of %s files, first (every blob uploaded)", human(float64(files))), ms(first))
	t.add("the same tree again with one file changed (one blob and the manifest)", ms(resubmit))
	t.add("a cold extract on the worker: blobs into its cache, then the attempt's copy", ms(coldD))
	t.add("a cached tree: the attempt's copy, "+how, ms(warmD))
	t.add("submit to start, a run without a Python env (`rlsched worker`, python3 -c pass)", ms(plain))
	t.add("the same with --requirements, the env built (first run)", ms(coldEnv))
	t.add("the same with --requirements, the env cached (warm)", ms(warmEnv))
	rep.goal(resubmit <= 300*time.Millisecond, "a 20 MB, 2,000-file tree resubmitted with one file changed accepted in ≤ 300 ms: %s", ms(resubmit))
	rep.goal(warmD <= 50*time.Millisecond && warmD*10 <= coldD, "a cached tree materialised in ≤ 50 ms and ≤ 10%% of a cold extract: %s, %.1f%% of %s",
		ms(warmD), 100*warmD.Seconds()/coldD.Seconds(), ms(coldD))
	rep.goal(warmEnv-plain <= time.Second, "a warm venv adds ≤ 1 s to a run's start: %s", ms(warmEnv-plain))
	rep.note("The submissions run the rlsched binary as a user does (its process start, the packing and hashing of every file, POST /api/code/missing, the uploads, POST /api/code/trees and POST /api/train); the resubmission uploads one 10 KiB blob and the manifest. The cold extract's blobs come from memory here, not over a worker's connection: on a real worker the fetch adds the network. The env rows: one `rlsched worker` (RUN_AS=none, PIP_NO_INDEX=1) runs `python3 -c pass` in a directory with a requirements file naming nothing, so the build is `python3 -m venv` and an offline pip; the time is the run's startedAt less its createdAt, median of the repeats.")
	rep.result = result{metric: "code_resubmit_ms", value: float64(resubmit.Microseconds()) / 1e3, unit: "ms"}
	return rep, nil
}

// memBlobs is a master's side of FetchCode from memory.
type memBlobs struct{ b map[string][]byte }

func (s *memBlobs) FetchCode(sum string, size int64, w io.Writer) (int64, error) {
	b, ok := s.b[sum]
	if !ok {
		return 0, errors.New("no such blob " + sum)
	}
	n, err := w.Write(b)
	return int64(n), err
}

// envStarts is the submit-to-start time of a run without a Python env, of
// the first run whose env is built from a requirements file, and of the
// runs after it that find the env cached (medians).
func envStarts(e *env, m *rlMaster, tok, dataDir string, repeats int) (plain, cold, warm time.Duration, err error) {
	bin, err := e.rlschedBin()
	if err != nil {
		return 0, 0, 0, err
	}
	work := filepath.Join(dataDir, "envwork")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return 0, 0, 0, err
	}
	if err := os.WriteFile(filepath.Join(work, "requirements.txt"), []byte("# nothing: the env's own cost\n"), 0o644); err != nil {
		return 0, 0, 0, err
	}
	cmd := exec.Command(bin, "worker", "--master", m.rpc, "--id", "bench-code", "--slots", "2", "--gpus", "0",
		"--data-dir", filepath.Join(dataDir, "worker"))
	cmd.Env = append(os.Environ(), "WORKER_JOIN_TOKEN="+benchJoinToken, "LOG_FORMAT=json", "RUN_AS=none", "PIP_NO_INDEX=1")
	logf, err := os.Create(filepath.Join(e.tmp, fmt.Sprintf("code-worker-%d.log", time.Now().UnixNano())))
	if err != nil {
		return 0, 0, 0, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = e.start(cmd)
	logf.Close()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("cannot start rlsched worker: %w", err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	if err := waitIdleWorkers(m.url, 1, 30*time.Second); err != nil {
		return 0, 0, 0, err
	}
	start := func(withEnv bool) (time.Duration, error) {
		body := map[string]any{"command": []string{"python3", "-c", "pass"}, "workdir": work}
		if withEnv {
			body["python"] = map[string]string{"requirements": "requirements.txt"}
		}
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, m.url+"/api/train", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return 0, fmt.Errorf("POST /api/train: HTTP %d %s", resp.StatusCode, bytes.TrimSpace(out))
		}
		var a struct{ ID string }
		if err := json.Unmarshal(out, &a); err != nil {
			return 0, err
		}
		var tk struct {
			Status               string
			Error                string
			CreatedAt, StartedAt time.Time
		}
		for deadline := time.Now().Add(5 * time.Minute); ; {
			if err := m.get("/api/tasks/"+a.ID, &tk); err != nil {
				return 0, err
			}
			if tk.Status == "SUCCEEDED" {
				return tk.StartedAt.Sub(tk.CreatedAt), nil
			}
			if tk.Status == "FAILED" || tk.Status == "CANCELLED" || time.Now().After(deadline) {
				return 0, fmt.Errorf("run %s is %s: %s", a.ID, tk.Status, tk.Error)
			}
			time.Sleep(100 * time.Millisecond) // the harness's poll, not the path measured
		}
	}
	median := func(withEnv bool) (time.Duration, error) {
		var ds []time.Duration
		for range repeats {
			d, err := start(withEnv)
			if err != nil {
				return 0, err
			}
			ds = append(ds, d)
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	if plain, err = median(false); err != nil {
		return 0, 0, 0, err
	}
	if cold, err = start(true); err != nil {
		return 0, 0, 0, err
	}
	warm, err = median(true)
	return plain, cold, warm, err
}
