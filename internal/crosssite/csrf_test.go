package crosssite

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func header(method string, kv ...string) *fasthttp.RequestHeader {
	var h fasthttp.RequestHeader
	h.SetMethod(method)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &h
}

func TestApplies(t *testing.T) {
	f := func(name string, want bool, h *fasthttp.RequestHeader, byCookie, session bool) {
		t.Helper()
		if got := Applies(h, byCookie, session); got != want {
			t.Errorf("%s: Applies = %v, want %v", name, got, want)
		}
	}
	f("cookie POST", true, header("POST"), true, false)
	f("cookie DELETE", true, header("DELETE"), true, false)
	f("cookie GET", false, header("GET"), true, false)
	f("bearer POST", false, header("POST", "Origin", "http://evil.example"), false, false)
	f("browser login", true, header("POST", "Origin", "http://x"), false, true)
	f("browser login, fetch metadata only", true, header("POST", "Sec-Fetch-Site", "cross-site"), false, true)
	f("login with a cookie", true, header("POST", "Cookie", "a=b"), false, true)
	f("CLI login", false, header("POST"), false, true)
}

func TestCrossSite(t *testing.T) {
	const site = "rlsched.lab:8081"
	f := func(name string, refused bool, kv ...string) {
		t.Helper()
		why := CrossSite(header("POST", kv...), site)
		if (why != "") != refused {
			t.Errorf("%s: CrossSite = %q, want refused %v", name, why, refused)
		}
	}
	json := "application/json"
	f("same origin", false, "Content-Type", json, "Origin", "http://rlsched.lab:8081")
	f("same origin https", false, "Content-Type", json, "Origin", "https://RLSCHED.lab:8081")
	f("charset", false, "Content-Type", "Application/JSON; charset=utf-8", "Origin", "http://rlsched.lab:8081")
	f("fetch metadata", false, "Content-Type", json, "Sec-Fetch-Site", "same-origin")
	f("other host", true, "Content-Type", json, "Origin", "http://evil.example:8081")
	f("other port", true, "Content-Type", json, "Origin", "http://rlsched.lab:8082")
	f("default port", true, "Content-Type", json, "Origin", "http://rlsched.lab")
	f("null", true, "Content-Type", json, "Origin", "null")
	f("path in origin", true, "Content-Type", json, "Origin", "http://rlsched.lab:8081/x")
	f("no origin", true, "Content-Type", json)
	f("same-site is not same-origin", true, "Content-Type", json, "Sec-Fetch-Site", "same-site")
	f("text/plain", true, "Content-Type", "text/plain", "Origin", "http://rlsched.lab:8081")
	f("form", true, "Content-Type", "application/x-www-form-urlencoded", "Origin", "http://rlsched.lab:8081")
	f("json-ish", true, "Content-Type", "application/jsonp", "Origin", "http://rlsched.lab:8081")
	f("no content type", true, "Origin", "http://rlsched.lab:8081")
}

func TestSameOrigin(t *testing.T) {
	f := func(origin, site string, want bool) {
		t.Helper()
		if got := SameOrigin(origin, site); got != want {
			t.Errorf("SameOrigin(%q, %q) = %v, want %v", origin, site, got, want)
		}
	}
	f("http://a.example", "a.example", true)
	f("http://a.example", "a.example:80", true)
	f("https://a.example", "a.example", true)
	f("https://a.example", "a.example:443", true)
	f("http://a.example:8081", "a.example", false)
	f("http://[::1]:8081", "[::1]:8081", true)
	f("http://a.example:8081", "b.example:8081", false)
	f("ftp://a.example", "a.example", false)
	f("http://user@a.example", "a.example", false)
	f("", "a.example", false)
}
