package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestJoinToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("join-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORKER_JOIN_TOKEN", "")
	if tok, err := joinToken(file); err != nil || tok != "join-0123456789abcdef" {
		t.Fatalf("from the file: %q %v", tok, err)
	}
	t.Setenv("WORKER_JOIN_TOKEN", "from-env-0123456789")
	if tok, err := joinToken(""); err != nil || tok != "from-env-0123456789" {
		t.Fatalf("from the env: %q %v", tok, err)
	}
	if _, err := joinToken(file); err == nil || !strings.Contains(err.Error(), "set one") {
		t.Fatalf("both: %v", err)
	}
	t.Setenv("WORKER_JOIN_TOKEN", "")
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := joinToken(file); err == nil || !strings.Contains(err.Error(), "chmod 600 "+file) {
		t.Fatalf("a file others can read: %v", err)
	}
}
