// Package s3 is the artifact.Store in an S3-compatible bucket
// (ARTIFACT_S3_*), on the minio-go client: it streams uploads as multipart
// uploads with one part in memory, aborts them on failure, does ranged
// GetObject and server-side copies (also past the 5 GiB single-copy limit),
// against AWS, MinIO, SeaweedFS, Ceph and the like.
//
// Keys: <prefix>sha256/<digest> for blobs, <prefix>tmp/<random> for uploads
// in progress. S3 cannot rename, and the digest is known only once the
// bytes went through, so a Put uploads to a temporary key while hashing,
// then copies it server-side to the digest's key (unless that key already
// exists: dedup) and deletes the temporary one. A reader that fails, a
// wrong size or a cancelled context delete the temporary key and abort its
// multipart upload. So a digest's key only ever holds the complete bytes of
// that digest, whichever master wrote it. A master that crashes mid-Put
// leaves a temporary key: a bucket lifecycle rule expiring <prefix>tmp/
// after a day removes those (and unfinished multipart uploads).
//
// This package must never write a digest's key from anything but a
// complete upload of those bytes, and never build a key from an
// unvalidated digest.
package s3

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// PartSize is the multipart part size and so the memory one Put holds.
// 16 MiB × 10,000 parts allows blobs up to 156 GiB, far above
// ARTIFACT_MAX_FILE_BYTES' default of 4 GiB.
const PartSize = 16 << 20

// cleanupTimeout bounds the deletion of a failed Put's temporary key, which
// runs even when the Put's context is cancelled.
const cleanupTimeout = 30 * time.Second

// Config names the bucket; its fields are the ARTIFACT_S3_* settings.
type Config struct {
	// Endpoint is http://host:port or https://host[:port]; without a
	// scheme it is https.
	Endpoint  string
	Bucket    string
	AccessKey string
	SecretKey string
	// Region is optional; empty asks the server.
	Region string
	// Prefix is put before every key, so one bucket can hold several
	// installations; a trailing "/" is added when missing.
	Prefix string
}

// Store is an artifact.Store in one bucket. Its methods are safe for
// concurrent use.
type Store struct {
	c      *minio.Client
	bucket string
	prefix string
}

var _ artifact.Store = (*Store)(nil)

// Open connects to the bucket and checks that it exists and the keys work.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"ARTIFACT_S3_ENDPOINT", cfg.Endpoint}, {"ARTIFACT_S3_BUCKET", cfg.Bucket},
		{"ARTIFACT_S3_ACCESS_KEY", cfg.AccessKey}, {"ARTIFACT_S3_SECRET_KEY", cfg.SecretKey},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("cannot use the S3 artifact store: set %s", strings.Join(missing, ", "))
	}
	host, secure, err := parseEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	c, err := minio.New(host, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: secure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create the S3 client for %s: %w", cfg.Endpoint, err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("cannot reach S3 bucket %q at %s (check ARTIFACT_S3_ENDPOINT and the keys): %w", cfg.Bucket, cfg.Endpoint, err)
	}
	if !ok {
		return nil, fmt.Errorf("S3 bucket %q does not exist at %s: create it, or set ARTIFACT_S3_BUCKET to an existing one", cfg.Bucket, cfg.Endpoint)
	}
	prefix := cfg.Prefix
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{c: c, bucket: cfg.Bucket, prefix: prefix}, nil
}

// parseEndpoint splits an endpoint into minio's host and TLS flag.
func parseEndpoint(ep string) (host string, secure bool, err error) {
	if !strings.Contains(ep, "://") {
		ep = "https://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("invalid ARTIFACT_S3_ENDPOINT %q: %w", ep, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("invalid ARTIFACT_S3_ENDPOINT %q: want http(s)://host[:port], without a path", ep)
	}
	return u.Host, u.Scheme == "https", nil
}

func (s *Store) blobKey(sum string) string { return s.prefix + "sha256/" + sum }

// Put implements artifact.Store.
func (s *Store) Put(ctx context.Context, r io.Reader, size int64) (artifact.Blob, error) {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	tmp := s.prefix + "tmp/" + hex.EncodeToString(rnd[:])
	h := artifact.NewHasher(size)
	defer h.Close()
	hr := h.Reader(ctx, r)
	// The temporary key goes whatever happens: copied, a duplicate, or
	// failed.
	defer s.removeTemp(ctx, tmp)
	_, err := s.c.PutObject(ctx, s.bucket, tmp, hr, size, minio.PutObjectOptions{
		PartSize:    PartSize,
		ContentType: "application/octet-stream",
	})
	// The source's own failure (or ErrSize) wins over what the client made
	// of it, and fails an upload the server accepted: the client stops
	// reading at the announced size (at 0 it reads nothing), and the server
	// may answer before the client saw that the reader yields more.
	if herr := h.Finish(ctx, r); herr != nil {
		err = herr
	}
	if err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot upload the artifact to S3: %w", err)
	}
	b := h.Sum()
	key := s.blobKey(b.SHA256)
	if _, err := s.c.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err == nil {
		return b, nil // stored before
	} else if !isNotFound(err) {
		return artifact.Blob{}, fmt.Errorf("cannot look up artifact %s in S3: %w", b.SHA256, err)
	}
	// ComposeObject does one CopyObject up to 5 GiB and a multipart copy
	// above; the bytes never leave the server.
	_, err = s.c.ComposeObject(ctx,
		minio.CopyDestOptions{Bucket: s.bucket, Object: key},
		minio.CopySrcOptions{Bucket: s.bucket, Object: tmp})
	if err != nil {
		return artifact.Blob{}, fmt.Errorf("cannot commit artifact %s in S3: %w", b.SHA256, err)
	}
	return b, nil
}

// removeTemp deletes a temporary key, also when ctx is cancelled. (The
// client itself aborts the multipart upload of a PutObject that fails,
// also detached from a cancelled ctx.)
func (s *Store) removeTemp(ctx context.Context, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = s.c.RemoveObject(ctx, s.bucket, tmp, minio.RemoveObjectOptions{})
}

// Open implements artifact.Store.
func (s *Store) Open(ctx context.Context, sum string, off, n int64) (io.ReadCloser, error) {
	b, err := s.Stat(ctx, sum)
	if err != nil {
		return nil, err
	}
	if n, err = artifact.CheckRange(b.Size, off, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	var opts minio.GetObjectOptions
	if off != 0 || n != b.Size {
		if err := opts.SetRange(off, off+n-1); err != nil {
			return nil, fmt.Errorf("cannot read artifact %s: %w", sum, err)
		}
	}
	obj, err := s.c.GetObject(ctx, s.bucket, s.blobKey(sum), opts)
	if err != nil {
		return nil, fmt.Errorf("cannot read artifact %s from S3: %w", sum, err)
	}
	return obj, nil
}

// Stat implements artifact.Store.
func (s *Store) Stat(ctx context.Context, sum string) (artifact.Blob, error) {
	if err := artifact.CheckSHA256(sum); err != nil {
		return artifact.Blob{}, err
	}
	info, err := s.c.StatObject(ctx, s.bucket, s.blobKey(sum), minio.StatObjectOptions{})
	if err != nil {
		return artifact.Blob{}, s3Err("stat", sum, err)
	}
	return artifact.Blob{SHA256: sum, Size: info.Size}, nil
}

// Delete implements artifact.Store. S3 deletes absent keys without a word,
// so it looks first, to report core.ErrNotFound like the disk backend.
func (s *Store) Delete(ctx context.Context, sum string) error {
	if _, err := s.Stat(ctx, sum); err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, s.blobKey(sum), minio.RemoveObjectOptions{}); err != nil {
		return s3Err("delete", sum, err)
	}
	return nil
}

func isNotFound(err error) bool {
	return minio.ToErrorResponse(err).StatusCode == http.StatusNotFound
}

// s3Err maps a missing key to core.ErrNotFound.
func s3Err(verb, sum string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("cannot %s artifact %s: %w", verb, sum, core.ErrNotFound)
	}
	return fmt.Errorf("cannot %s artifact %s in S3: %w", verb, sum, err)
}
