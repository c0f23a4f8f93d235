// Package netns gives a test network namespaces of their own, each with its
// own address, on one segment with the test's own namespace (issue 29:
// workers of a multi-node group on hosts of their own). The segment is a
// bridge in a hub namespace made for the test, so no forwarding, firewall
// or bridge setting of the machine is read or changed: the test's side is
// a veth in its namespace whose peer is on the hub's bridge, and so is
// every namespace's. Everything is deleted when the test ends.
//
// It needs root, iproute2's `ip netns` and util-linux's nsenter. Outside CI a test is skipped
// when they are missing; under CI=true (which runs as root) it fails.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Net is a test's segment: Host is the address of the test's own end, NS
// the namespaces' names and Addrs their addresses, in the same order.
type Net struct {
	Host  string
	NS    []string
	Addrs []string
}

// New makes n namespaces on a segment of their own for t (a /24 of
// 10.<a>.<b>.0 chosen at random, so parallel tests do not collide).
func New(t *testing.T, n int) *Net {
	t.Helper()
	if err := usable(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("network namespaces are needed here (CI runs as root with iproute2): %v", err)
		}
		t.Skipf("network namespaces are not usable: %v", err)
	}
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	tag := hex.EncodeToString(rb[:]) // names stay under IFNAMSIZ: "rh" + 6 + suffix
	prefix := fmt.Sprintf("10.%d.%d.", 100+int(rb[0])%100, rb[1])
	hub := "rls-hub-" + tag
	nt := &Net{Host: prefix + "1"}
	var cmds [][]string
	cmds = append(cmds,
		[]string{"netns", "add", hub},
		[]string{"-n", hub, "link", "set", "lo", "up"},
		[]string{"-n", hub, "link", "add", "br0", "type", "bridge"},
		[]string{"-n", hub, "link", "set", "br0", "up"},
		// The test's end: a veth here, its peer on the bridge.
		[]string{"link", "add", "rh" + tag, "type", "veth", "peer", "name", "rp" + tag},
		[]string{"link", "set", "rp" + tag, "netns", hub},
		[]string{"-n", hub, "link", "set", "rp" + tag, "master", "br0"},
		[]string{"-n", hub, "link", "set", "rp" + tag, "up"},
		[]string{"addr", "add", nt.Host + "/24", "dev", "rh" + tag},
		[]string{"link", "set", "rh" + tag, "up"},
	)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", "rh"+tag).Run()
		for _, ns := range nt.NS {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
		_ = exec.Command("ip", "netns", "del", hub).Run()
	})
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("rls-%s-%d", tag, i)
		addr := fmt.Sprintf("%s%d", prefix, 10+i)
		in, out := fmt.Sprintf("ri%s%d", tag, i), fmt.Sprintf("ro%s%d", tag, i)
		cmds = append(cmds,
			[]string{"netns", "add", ns},
			[]string{"-n", ns, "link", "set", "lo", "up"},
			[]string{"-n", ns, "link", "add", in, "type", "veth", "peer", "name", out},
			[]string{"-n", ns, "link", "set", out, "netns", hub},
			[]string{"-n", hub, "link", "set", out, "master", "br0"},
			[]string{"-n", hub, "link", "set", out, "up"},
			[]string{"-n", ns, "addr", "add", addr + "/24", "dev", in},
			[]string{"-n", ns, "link", "set", in, "up"},
		)
		nt.NS, nt.Addrs = append(nt.NS, ns), append(nt.Addrs, addr)
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return nt
}

// Exec is the argv that runs argv in namespace ns: nsenter enters only
// its network namespace (`ip netns exec` also mounts a sysfs of its own,
// hiding /sys/fs/cgroup from a worker) and execs argv, so the process
// started is argv's own (a signal to it reaches it).
func Exec(ns string, argv ...string) []string {
	return append([]string{"nsenter", "--net=/var/run/netns/" + ns, "--"}, argv...)
}

// usable reports why namespaces cannot be made here, or nil.
func usable() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("iproute2's ip is not installed: %w", err)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		return fmt.Errorf("util-linux's nsenter is not installed: %w", err)
	}
	name := "rls-probe-" + fmt.Sprint(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return nil
}
