package toolbin

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestFreeLowPorts(t *testing.T) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		low, _ = strconv.Atoi(strings.Fields(string(b))[0])
	}
	ports, err := FreeLowPorts(10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] || p < 10000 || p >= low {
			t.Fatalf("FreeLowPorts(10) = %v: port %d repeated or outside [10000, %d)", ports, p, low)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
}

// The cache key is what .ci/run computes with
// `cat go.mod go.sum | sha256sum | cut -c1-12`.
func TestKeyMatchesShell(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("no sha256sum")
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(root, "tools", "seaweedfs")
	got, err := key(mod)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "cat go.mod go.sum | sha256sum | cut -c1-12")
	cmd.Dir = mod
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("key = %q, the shell computes %q", got, want)
	}
}
