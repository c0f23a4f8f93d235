package s3test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// The server answers with the generated keys, refuses others, and is gone
// after Stop.
func TestStart(t *testing.T) {
	begin := time.Now()
	s := Start(t)
	t.Logf("SeaweedFS ready in %v at %s", time.Since(begin), s.Endpoint)
	ctx := t.Context()
	if _, err := s.Client.PutObject(ctx, s.Bucket, "a/b", bytes.NewReader([]byte("hello")), 5, minio.PutObjectOptions{}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	obj, err := s.Client.GetObject(ctx, s.Bucket, "a/b", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(obj); err != nil || string(b) != "hello" {
		t.Fatalf("GetObject = %q, %v", b, err)
	}
	s.Stop()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := s.Client.BucketExists(ctx, s.Bucket); err == nil {
		t.Fatal("the server still answers after Stop")
	}
}
