package discovery

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/testkit/nacostest"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func TestParseAddr(t *testing.T) {
	f := func(addr string, want string) {
		t.Helper()
		got, err := parseAddr(addr)
		s := ""
		for _, c := range got {
			s += fmt.Sprintf("%s://%s:%d%s ", c.Scheme, c.IpAddr, c.Port, c.ContextPath)
		}
		if err != nil {
			s = "error"
		}
		if s != want {
			t.Errorf("parseAddr(%q) = %q, want %q", addr, s, want)
		}
	}
	f("127.0.0.1:8848", "http://127.0.0.1:8848/nacos ")
	f("http://a:1,b:2/nacos/", "http://a:1/nacos http://b:2/nacos ")
	f(" nacos.internal:8848 , ", "http://nacos.internal:8848/nacos ")
	f("", "error")
	f("localhost", "error")
	f("h:0", "error")
	f("ftp://h:1", "error")
}

func TestRegisterAndWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Nacos-protocol server")
	}
	srv := nacostest.Start(t)
	o := Options{Addr: srv.Addr, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	var mu sync.Mutex
	last := map[string][]Instance{}
	w, err := Watch(o, []string{"svc-a", "svc-b"}, func(svc string, insts []Instance) {
		mu.Lock()
		defer mu.Unlock()
		last[svc] = insts
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wait := func(svc, want string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, func() (bool, string) {
			mu.Lock()
			got := ""
			for _, in := range last[svc] {
				got += fmt.Sprintf("%s:%d %v %s;", in.IP, in.Port, in.Healthy && in.Enabled, in.Metadata["role"])
			}
			mu.Unlock()
			return got == want, fmt.Sprintf("%s: %q, want %q", svc, got, want)
		})
	}
	r1, err := Register(o, Instance{Service: "svc-a", IP: "127.0.0.1", Port: 1111, Metadata: map[string]string{"role": "one"}})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Register(o, Instance{Service: "svc-b", IP: "127.0.0.1", Port: 2222, Metadata: map[string]string{"role": "two"}})
	if err != nil {
		t.Fatal(err)
	}
	wait("svc-a", "127.0.0.1:1111 true one;")
	wait("svc-b", "127.0.0.1:2222 true two;")
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	wait("svc-a", "") // gone, not kept stale
	wait("svc-b", "127.0.0.1:2222 true two;")
	if err := r2.Close(); err != nil || r2.Close() != nil {
		t.Fatal(err)
	}
	wait("svc-b", "")
	var nilReg *Registration
	if err := nilReg.Close(); err != nil {
		t.Fatal(err)
	}
}
