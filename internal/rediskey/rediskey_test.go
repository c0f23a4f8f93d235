package rediskey

import "testing"

func TestCheck(t *testing.T) {
	for _, p := range []string{"rlsched", "lab1", "a-b_c.d:e"} {
		if err := Check(p); err != nil {
			t.Errorf("Check(%q): %v", p, err)
		}
	}
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	for _, p := range []string{"", "a{b", "a}b", "a*", "a?", "a[b]", `a\b`, "a b", "a\tb", "a\nb", string(long)} {
		if err := Check(p); err == nil {
			t.Errorf("Check(%q) accepted", p)
		}
	}
}

// The names are those deployments already have in Redis: changing one
// strands every key of a running deployment.
func TestNames(t *testing.T) {
	f := func(got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	f(Key("lab", Fence), "{lab}:fence")
	f(Key("lab", Leases), "{lab}:leases")
	f(Key("lab", Expiry), "{lab}:lease_expiry")
	f(Key("lab", Presence), "{lab}:presence")
	f(Key("lab", Masters), "{lab}:presence_host")
	f(Key("lab", Ready), "{lab}:ready")
	f(Key("lab", RateLimit+"user:7"), "{lab}:gw_ratelimit:user:7")
	f(Channel("lab", Cluster), "lab:cluster")
	f(Pattern("lab"), "{lab}:*")
}
