package testsvc

import (
	"net"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Skip and Fatal instead of ending
// the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

type stop struct{}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(args ...any)      { r.skipped = args[0].(string); panic(stop{}) }
func (r *recorder) Fatal(args ...any)     { r.failed = args[0].(string); panic(stop{}) }
func (r *recorder) Fatalf(string, ...any) { r.failed = "fatalf"; panic(stop{}) }

func run(r *recorder, f func(testing.TB)) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(stop); !ok {
				panic(p)
			}
		}
	}()
	f(r)
}

// deadAddr returns a local address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestMissingService(t *testing.T) {
	addr := deadAddr(t)
	f := func(ci string, wantSkip bool) {
		t.Helper()
		t.Setenv("CI", ci)
		t.Setenv(RedisEnv, addr)
		t.Setenv(MySQLEnv, "root@tcp("+addr+")/")
		for _, req := range []func(testing.TB){
			func(tb testing.TB) { RequireRedis(tb) },
			func(tb testing.TB) { RequireMySQL(tb) },
		} {
			r := &recorder{TB: t}
			run(r, req)
			got := r.skipped
			if !wantSkip {
				got = r.failed
			}
			if !strings.Contains(got, addr) || !strings.Contains(got, "scripts/services.sh") {
				t.Fatalf("CI=%q: skipped %q, failed %q; want a %s naming %s and the fix",
					ci, r.skipped, r.failed, map[bool]string{true: "skip", false: "failure"}[wantSkip], addr)
			}
		}
	}
	f("", true)
	f("false", true)
	f("true", false)
}

func TestPresentService(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("CI", "true")
	t.Setenv(RedisEnv, l.Addr().String())
	t.Setenv(MySQLEnv, "u:p@tcp("+l.Addr().String()+")/")
	if got := RequireRedis(t); got != l.Addr().String() {
		t.Fatalf("RequireRedis = %q", got)
	}
	if got := RequireMySQL(t); got != "u:p@tcp("+l.Addr().String()+")/" {
		t.Fatalf("RequireMySQL = %q", got)
	}
}
