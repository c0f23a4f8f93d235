package main

import (
	"bytes"
	"encoding/hex"
	"github.com/rlsched/rlsched/worker"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/codec"
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

func TestWorkerCredential(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("WORKER_JOIN_TOKEN", "")
	t.Setenv("WORKER_KEY", "")
	key := codec.WorkerKey([]byte("join-0123456789abcdef"), "w1")
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, k, err := workerCredential("", keyFile); err != nil || tok != "" || !bytes.Equal(k, key) {
		t.Fatalf("from the key file: %q %x %v", tok, k, err)
	}
	t.Setenv("WORKER_KEY", hex.EncodeToString(key))
	if _, k, err := workerCredential("", ""); err != nil || !bytes.Equal(k, key) {
		t.Fatalf("from WORKER_KEY: %x %v", k, err)
	}
	f := func(want string) {
		t.Helper()
		if _, _, err := workerCredential("", ""); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want an error with %q", err, want)
		}
	}
	t.Setenv("WORKER_JOIN_TOKEN", "join-0123456789abcdef")
	f("set one")
	t.Setenv("WORKER_JOIN_TOKEN", "")
	t.Setenv("WORKER_KEY", hex.EncodeToString(key)[:32]) // 16 bytes: not a key
	f("64 hex digits")
	t.Setenv("WORKER_KEY", "")
	f("no credential")
	t.Setenv("WORKER_JOIN_TOKEN", "short-token")
	f("shorter than 16")
	t.Setenv("WORKER_JOIN_TOKEN", "join-0123456789abcdef")
	if tok, k, err := workerCredential("", ""); err != nil || tok != "join-0123456789abcdef" || k != nil {
		t.Fatalf("from the token: %q %x %v", tok, k, err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WORKER_JOIN_TOKEN", "")
	if _, _, err := workerCredential("", keyFile); err == nil || !strings.Contains(err.Error(), "chmod 600 "+keyFile) {
		t.Fatalf("a key file others can read: %v", err)
	}
}

func TestWorkerKeyCommand(t *testing.T) {
	t.Setenv("WORKER_JOIN_TOKEN", "join-0123456789abcdef")
	var out bytes.Buffer
	if err := runWorkerKey([]string{"w1"}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), hex.EncodeToString(codec.WorkerKey([]byte("join-0123456789abcdef"), "w1"))+"\n"; got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
	f := func(args []string, want string) {
		t.Helper()
		if err := runWorkerKey(args, io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("worker-key %v: %v, want an error with %q", args, err, want)
		}
	}
	f(nil, "give one worker id")
	f([]string{"../etc"}, "not a worker id")
	t.Setenv("WORKER_JOIN_TOKEN", "short")
	f([]string{"w1"}, "shorter than 16")
	t.Setenv("WORKER_JOIN_TOKEN", "")
	f([]string{"w1"}, "WORKER_JOIN_TOKEN is not set")
}

// TestCheckRunAsRegistration (issue 25): `up` refuses RUN_AS=user with open
// registration, where anyone could register an existing Unix account's
// name; closed and admin registration, and the other RUN_AS, are fine.
func TestCheckRunAsRegistration(t *testing.T) {
	for _, c := range []struct {
		runAs, registration string
		ok                  bool
	}{
		{worker.RunAsUser, "open", false}, {worker.RunAsUser, "", false},
		{worker.RunAsUser, "closed", true}, {worker.RunAsUser, "admin", true},
		{worker.RunAsDynamic, "open", true}, {worker.RunAsNone, "open", true},
	} {
		if err := checkRunAsRegistration(c.runAs, c.registration); (err == nil) != c.ok {
			t.Errorf("RUN_AS=%s REGISTRATION=%q: %v, want ok %v", c.runAs, c.registration, err, c.ok)
		}
	}
}
