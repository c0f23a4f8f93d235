// Package s3test runs a real S3 server for tests: SeaweedFS (`weed mini`,
// Apache-2.0), built from tools/seaweedfs through the module proxy
// and cached like every tools binary (internal/testkit/toolbin); $RLSCHED_WEED_BIN
// names a ready binary instead. A cold build takes minutes; start-up takes
// a few seconds.
//
// Each Start runs a server of its own on free loopback ports, in a
// temporary directory, with one identity whose keys Start generates and
// one bucket, and kills it when the test ends. Outside CI a test is skipped
// when the server cannot be built; under CI=true it fails.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rlsched/rlsched/internal/testkit/toolbin"
)

// Weed is the SeaweedFS binary.
var Weed = &toolbin.Tool{
	Name:    "weed",
	Module:  "tools/seaweedfs",
	Package: "github.com/seaweedfs/seaweedfs/weed",
	Env:     "RLSCHED_WEED_BIN",
	What:    "the SeaweedFS S3 server",
}

// Region is the region the server answers for.
const Region = "us-east-1"

// Server is a running SeaweedFS with S3.
type Server struct {
	// Endpoint is http://127.0.0.1:port (ARTIFACT_S3_ENDPOINT).
	Endpoint             string
	AccessKey, SecretKey string
	// Bucket exists and is empty at start.
	Bucket string
	// Client is a client of the server with the keys above.
	Client *minio.Client

	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// Start runs a server of its own for t, ready to serve, with Bucket
// created; t's cleanup kills it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Weed.Binary(t)
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 3; try++ {
		s, err := start(t.Context(), bin, filepath.Join(dir, strconv.Itoa(try)))
		if err == nil {
			t.Cleanup(func() {
				exited := s.exited()
				s.Stop()
				if t.Failed() || exited {
					out, _ := os.ReadFile(s.log)
					t.Logf("s3test: SeaweedFS at %s (exited before the end: %v), its log:\n%s",
						s.Endpoint, exited, toolbin.Tail(string(out), 40))
				}
			})
			return s
		}
		lastErr = err
	}
	t.Fatalf("s3test: cannot start SeaweedFS: %v", lastErr)
	return nil
}

// Run is Start for a program that is not a test (the benchmark harness): a
// server in dir, which the caller stops (Server.Stop).
func Run(ctx context.Context, dir string) (*Server, error) {
	bin, err := Weed.Path()
	if err != nil {
		return nil, fmt.Errorf("cannot build SeaweedFS: %w", err)
	}
	return start(ctx, bin, dir)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// identities is SeaweedFS's -s3.config: one identity with every right.
type identities struct {
	Identities []identity `json:"identities"`
}

type identity struct {
	Name        string       `json:"name"`
	Credentials []credential `json:"credentials"`
	Actions     []string     `json:"actions"`
}

type credential struct {
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
}

func start(ctx context.Context, bin, dir string) (*Server, error) {
	// The master, volume, filer, S3 and admin servers each listen on HTTP
	// and gRPC (admin's HTTP stays shut with the UI off).
	ports, err := toolbin.FreeLowPorts(10)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("http://127.0.0.1:%d", ports[6]),
		AccessKey: "AK" + randomHex(9),
		SecretKey: randomHex(20),
		Bucket:    "rlsched-test",
		done:      make(chan struct{}),
		log:       filepath.Join(dir, "weed.log"),
	}
	cfg, _ := json.Marshal(identities{Identities: []identity{{
		Name:        "rlsched",
		Credentials: []credential{{AccessKey: s.AccessKey, SecretKey: s.SecretKey}},
		Actions:     []string{"Admin", "Read", "Write", "List", "Tagging"},
	}}})
	cfgPath := filepath.Join(dir, "s3.json")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	// `weed mini` rather than `weed server -s3`: the same master, volume,
	// filer and S3 servers in one process, but it lets its own volume
	// server's first report lift the master's post-election allocation
	// hold, so the first write lands after ≈ 3 s instead of ≈ 10 s.
	s.cmd = exec.Command(bin, "mini",
		"-dir="+data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+p(0), "-master.port.grpc="+p(1),
		"-volume.port="+p(2), "-volume.port.grpc="+p(3),
		"-filer.port="+p(4), "-filer.port.grpc="+p(5),
		"-s3.port="+p(6), "-s3.port.grpc="+p(7),
		"-admin.port="+p(8), "-admin.port.grpc="+p(9), "-admin.port.legacy=0", "-admin.ui=false",
		"-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
		"-s3.config="+cfgPath,
		// Unix sockets default to fixed names in /tmp, which parallel
		// servers would share.
		"-filer.localSocket="+filepath.Join(dir, "filer.sock"),
		"-s3.localSocket="+filepath.Join(dir, "s3.sock"),
		// Small volumes, a bounded count: test data is small, and a count
		// derived from free space finds no room on a small disk.
		"-master.volumeSizeLimitMB=128", "-volume.max=32",
		"-master.telemetry=false",
	)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	s.Client, err = minio.New(fmt.Sprintf("127.0.0.1:%d", ports[6]), &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region: Region,
	})
	if err != nil {
		s.Stop()
		return nil, err
	}
	// Ready when the bucket can be created and an object written: the S3
	// port answers before the filer and a volume are there.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.done:
			out, _ := os.ReadFile(s.log)
			return nil, fmt.Errorf("weed exited at start:\n%s", toolbin.Tail(string(out), 30))
		default:
		}
		err := s.ready(ctx)
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("SeaweedFS S3 not ready on %s within 60 s: %v", s.Endpoint, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Server) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ok, err := s.Client.BucketExists(ctx, s.Bucket)
	if err != nil {
		return err
	}
	if !ok {
		if err := s.Client.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{Region: Region}); err != nil {
			return err
		}
	}
	const probe = "s3test-ready"
	if _, err := s.Client.PutObject(ctx, s.Bucket, probe, strings.NewReader("ok"), 2, minio.PutObjectOptions{}); err != nil {
		return err
	}
	return s.Client.RemoveObject(ctx, s.Bucket, probe, minio.RemoveObjectOptions{})
}

func (s *Server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
	}
}
