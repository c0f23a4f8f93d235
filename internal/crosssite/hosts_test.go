package crosssite

import (
	"net"
	"slices"
	"testing"
)

func TestHosts(t *testing.T) {
	var h Hosts
	if h.Allows([]byte("localhost")) {
		t.Fatal("the zero Hosts allows a name")
	}
	if err := h.Add("Rlsched.Lab.Example.", "127.0.0.1:8081", "[::1]:8081", "::2", "gpu-box:9999"); err != nil {
		t.Fatal(err)
	}
	f := func(host string, want bool) {
		t.Helper()
		if got := h.Allows([]byte(host)); got != want {
			t.Errorf("Allows(%q) = %v, want %v", host, got, want)
		}
	}
	f("rlsched.lab.example", true)
	f("RLSCHED.lab.example:1234", true) // no port given: any
	f("rlsched.lab.example.", true)
	f("127.0.0.1:8081", true)
	f("127.0.0.1:8082", false)
	f("127.0.0.1", false)
	f("[::1]:8081", true)
	f("[::2]:7", true)
	f("gpu-box:9999", true)
	f("gpu-box", false)
	f("evil.example", false)
	f("", false)
	f("rlsched.lab.example@evil.example", false)
	f("127.0.0.1:8081/x", false)
	f("127.0.0.1:99999", false)

	for _, bad := range []string{"http://x/", "a b", "host:", "host:0", "host:port"} {
		if err := h.Add(bad); err == nil {
			t.Errorf("Add(%q) succeeded", bad)
		}
	}
	var off Hosts
	if err := off.Add("*"); err != nil || !off.Allows([]byte("anything")) || !off.Off() {
		t.Fatalf("* does not turn the check off: %v", err)
	}
	var ports Hosts
	_ = ports.Add("web.example:443")
	if !ports.Allows([]byte("web.example")) {
		t.Error("a Host without a port does not match the name on 443")
	}
}

func TestDefaultNames(t *testing.T) {
	got := DefaultNames(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 8081})
	for _, want := range []string{"localhost:8081", "127.0.0.1:8081", "[::1]:8081", "10.1.2.3:8081"} {
		if !slices.Contains(got, want) {
			t.Errorf("DefaultNames(10.1.2.3:8081) = %v, lacks %s", got, want)
		}
	}
	all := DefaultNames(&net.TCPAddr{IP: net.IPv4zero, Port: 8081})
	if !slices.Contains(all, "127.0.0.1:8081") || len(all) <= 3 {
		t.Errorf("DefaultNames(0.0.0.0:8081) = %v: want the interfaces and host name too", all)
	}
	var h Hosts
	if err := h.Add(all...); err != nil {
		t.Fatalf("the defaults are not valid names: %v", err)
	}
	if DefaultNames(&net.UnixAddr{Name: "/x"}) != nil {
		t.Error("names for a Unix socket")
	}
}
