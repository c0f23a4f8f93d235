package s3

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/artifact/artifacttest"
	"github.com/rlsched/rlsched/internal/testkit/s3test"
)

func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	artifacttest.Run(t, artifacttest.Harness{
		New: func(t *testing.T) artifact.Store {
			s, err := Open(t.Context(), Config{
				Endpoint: srv.Endpoint, Bucket: srv.Bucket,
				AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
				Region: s3test.Region, Prefix: fmt.Sprintf("t%d", n.Add(1)),
			})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		List: func(t *testing.T, st artifact.Store) []string { return list(t, st.(*Store)) },
		// One 16 MiB multipart part and the client's own buffers, far
		// below the blob's 64 MiB.
		MaxPutAlloc: 2 * PartSize,
	})
}

// list returns every key under the store's prefix and every unfinished
// multipart upload there.
func list(t *testing.T, s *Store) []string {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	var out []string
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("cannot list the bucket: %v", o.Err)
		}
		out = append(out, o.Key)
	}
	for u := range s.c.ListIncompleteUploads(ctx, s.bucket, s.prefix, true) {
		if u.Err != nil {
			t.Fatalf("cannot list unfinished uploads: %v", u.Err)
		}
		out = append(out, "upload:"+u.Key)
	}
	return out
}

func TestParseEndpoint(t *testing.T) {
	f := func(ep, host string, secure bool) {
		t.Helper()
		h, s, err := parseEndpoint(ep)
		if err != nil || h != host || s != secure {
			t.Fatalf("parseEndpoint(%q) = %q, %v, %v; want %q, %v", ep, h, s, err, host, secure)
		}
	}
	f("http://127.0.0.1:8333", "127.0.0.1:8333", false)
	f("https://s3.example.com", "s3.example.com", true)
	f("https://s3.example.com/", "s3.example.com", true)
	f("s3.example.com:9000", "s3.example.com:9000", true)
	for _, bad := range []string{"ftp://x", "http://", "http://h/bucket", "http://h?x=1", "http://u:p@h", "::"} {
		if _, _, err := parseEndpoint(bad); err == nil || !strings.Contains(err.Error(), "ARTIFACT_S3_ENDPOINT") {
			t.Fatalf("parseEndpoint(%q) = %v, want an error naming ARTIFACT_S3_ENDPOINT", bad, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	_, err := Open(t.Context(), Config{Endpoint: "http://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "ARTIFACT_S3_BUCKET, ARTIFACT_S3_ACCESS_KEY, ARTIFACT_S3_SECRET_KEY") {
		t.Fatalf("Open without bucket and keys = %v, want an error naming the missing settings", err)
	}
	srv := s3test.Start(t)
	cfg := Config{Endpoint: srv.Endpoint, Bucket: "no-such-bucket", AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Region: s3test.Region}
	if _, err := Open(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Open of a missing bucket = %v, want 'does not exist'", err)
	}
	cfg.Bucket, cfg.SecretKey = srv.Bucket, "wrong"
	if _, err := Open(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "cannot reach S3 bucket") {
		t.Fatalf("Open with a wrong secret key = %v, want 'cannot reach S3 bucket'", err)
	}
}
