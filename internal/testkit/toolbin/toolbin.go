// Package toolbin builds, for tests, the third-party servers that this
// repository pins in tools modules of their own (tools/<name>/go.mod with a
// `tool` directive, so their large dependency trees stay out of the main
// go.mod) and caches the binaries between test runs, in $RLSCHED_CACHE_DIR
// or $HOME/.cache/rlsched. .ci/run builds the same binaries under the same
// names before the tests start.
//
// When a binary cannot be built the test is skipped, or fails under
// CI=true, like internal/testkit/testsvc does for Redis. This package never
// downloads anything but through the go command and the module proxy.
package toolbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tool is a binary built from a tools module of this repository.
type Tool struct {
	// Name is the binary's name; the cached file is Name-<key>, the key
	// being the first 12 hex digits of the sha256 of the module's go.mod
	// followed by its go.sum, so a version bump builds anew:
	// `cat go.mod go.sum | sha256sum | cut -c1-12` in a shell.
	Name string
	// Module is the tools module's directory below the repository root.
	Module string
	// Package is the main package to build.
	Package string
	// Env names an environment variable that points at a ready binary
	// instead.
	Env string
	// What names the server in messages.
	What string

	once sync.Once
	bin  string
	err  error
}

// Binary returns the path of the tool's binary, building it once per test
// process (minutes when cold), or skips t (fails it under CI=true).
func (tl *Tool) Binary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv(tl.Env); b != "" {
		return b
	}
	tl.once.Do(func() { tl.bin, tl.err = tl.build() })
	if tl.err != nil {
		msg := fmt.Sprintf("toolbin: cannot build %s from %s: %v", tl.What, tl.Module, tl.err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return tl.bin
}

// Path is Binary for a program that is not a test (the benchmark harness):
// the binary's path, or why it cannot be built.
func (tl *Tool) Path() (string, error) {
	if b := os.Getenv(tl.Env); b != "" {
		return b, nil
	}
	tl.once.Do(func() { tl.bin, tl.err = tl.build() })
	return tl.bin, tl.err
}

// CacheDir is where built tools are kept.
func CacheDir() (string, error) {
	if d := os.Getenv("RLSCHED_CACHE_DIR"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "rlsched"), nil
}

// ModuleRoot finds the rlsched module root from the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.HasPrefix(string(b), "module github.com/rlsched/rlsched\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no rlsched go.mod above the working directory")
		}
		dir = parent
	}
}

// key hashes the tools module's go.mod and go.sum.
func key(moduleDir string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(moduleDir, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func (tl *Tool) build() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	mod := filepath.Join(root, tl.Module)
	k, err := key(mod)
	if err != nil {
		return "", err
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, tl.Name+"-"+k)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// One build at a time across test binaries (go test runs packages in
	// parallel): the others wait, then find the binary.
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp := fmt.Sprintf("%s.tmp%d", bin, os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "-C", mod,
		"build", "-trimpath", "-ldflags=-s -w", "-o", tmp, tl.Package)
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("%v\n%s", err, out)
	}
	// Rename is atomic: a concurrent test binary sees no file or a whole one.
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// FreeLowPorts returns n distinct loopback ports that accept a listener now,
// below the ephemeral range: no connection another test opens meanwhile can
// take one of them before the server binds it.
func FreeLowPorts(n int) ([]int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	lo, hi := 10000, low-1
	if hi-lo < 100*n {
		return nil, fmt.Errorf("no room below the ephemeral range (it starts at %d)", low)
	}
	seen := map[int]bool{}
	var ports []int
	for try := 0; len(ports) < n && try < 100*n; try++ {
		p := lo + rand.IntN(hi-lo)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no %d free ports below %d", n, low)
	}
	return ports, nil
}

// Tail returns the last lines of s.
func Tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
