package tfevents

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.out.tfevents.1.host")
	f := Follow(path)
	if pts, err := f.Poll(); err != nil || len(pts) != 0 {
		t.Fatalf("Poll before the file exists = %v, %v; want nothing", pts, err)
	}
	b := fileOf(fileVersion(), event(1, 1, simple("a", 1)), event(2, 2, simple("a", 2)))
	cut := len(b) - 7 // the last record torn
	if err := os.WriteFile(path, b[:cut], 0o600); err != nil {
		t.Fatal(err)
	}
	pts, err := f.Poll()
	if err != nil || len(pts) != 1 || pts[0].Step != 1 {
		t.Fatalf("Poll of a torn file = %+v, %v; want step 1", pts, err)
	}
	if pts, err := f.Poll(); err != nil || len(pts) != 0 {
		t.Fatalf("Poll with nothing new = %+v, %v", pts, err)
	}
	appendFile(t, path, b[cut:])
	pts, err = f.Poll()
	if err != nil || len(pts) != 1 || pts[0].Step != 2 {
		t.Fatalf("Poll after the rest = %+v, %v; want step 2", pts, err)
	}

	// Replaced by a shorter file: read from its start.
	if err := os.WriteFile(path, fileOf(event(9, 9, simple("b", 3))), 0o600); err != nil {
		t.Fatal(err)
	}
	pts, err = f.Poll()
	if err != nil || len(pts) != 1 || pts[0].Tag != "b" {
		t.Fatalf("Poll of a replaced file = %+v, %v; want b", pts, err)
	}

	// Corrupt: the error, then the same error without reading.
	appendFile(t, path, []byte("0123456789abcdefgh"))
	if _, err := f.Poll(); err == nil {
		t.Fatal("Poll of a corrupt tail succeeded")
	}
	var ce *CorruptError
	if _, err := f.Poll(); !errors.As(err, &ce) {
		t.Fatalf("second Poll after corruption = %v, want the CorruptError", err)
	}
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	fd, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.Write(b); err != nil {
		t.Fatal(err)
	}
}

// A run cannot point the reader elsewhere with a symbolic link, nor hang
// it with a FIFO.
func TestFollowRefusesLinksAndFIFOs(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, fileOf(event(1, 1, simple("secret", 1))), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "events.out.tfevents.link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if pts, err := Follow(link).Poll(); err == nil || len(pts) != 0 {
		t.Fatalf("Poll of a symlink = %+v, %v; want an error", pts, err)
	}
	fifo := filepath.Join(dir, "events.out.tfevents.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Follow(fifo).Poll(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Poll of a FIFO = %v, want 'not a regular file'", err)
	}
}
