package httpapi

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

type logAnswer struct {
	Status     string   `json:"status"`
	Content    []string `json:"content"`
	Offset     int64    `json:"offset"`
	NextOffset int64    `json:"nextOffset"`
	EOF        bool     `json:"eof"`
}

func TestLogs(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["a"]}`)

	get := func(q string) logAnswer {
		t.Helper()
		r := e.req("GET", "/api/monitor/logs/"+id+q, tok, nil)
		if r.status != http.StatusOK {
			t.Fatalf("logs%s: %d %s", q, r.status, r.body)
		}
		var a logAnswer
		mustJSON(t, r.body, &a)
		if a.Status != "SUCCESS" || a.Content == nil {
			t.Fatalf("logs%s: %s", q, r.body)
		}
		return a
	}
	f := func(q string, want logAnswer) {
		t.Helper()
		want.Status = "SUCCESS"
		if want.Content == nil {
			want.Content = []string{}
		}
		if got := get(q); !reflect.DeepEqual(got, want) {
			t.Fatalf("logs%s:\n got  %+v\n want %+v", q, got, want)
		}
	}

	// No file yet: empty, not at eof while the run is live.
	f("", logAnswer{})
	f("?offset=10", logAnswer{Offset: 10, NextOffset: 10})

	text := "TRACE_ID:abc\nline one\nline two\n\nlast"
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.logDir, id+".log"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	size := int64(len(text))
	// Live run: pages end at a newline; the unfinished last line waits.
	f("", logAnswer{Content: []string{"TRACE_ID:abc", "line one", "line two", ""}, NextOffset: 32})
	// A limit inside a line cuts at the last newline of the range.
	f("?limit=20", logAnswer{Content: []string{"TRACE_ID:abc"}, NextOffset: 13})
	f("?offset=13&limit=12", logAnswer{Content: []string{"line one"}, Offset: 13, NextOffset: 22})
	// A single line longer than limit comes raw.
	f("?offset=13&limit=4", logAnswer{Content: []string{"line"}, Offset: 13, NextOffset: 17})
	f("?offset=32", logAnswer{Offset: 32, NextOffset: 32})
	f("?offset=1000", logAnswer{Offset: 1000, NextOffset: 1000})

	// Raw bytes with Accept: text/plain, exactly the range.
	r := e.req("GET", "/api/monitor/logs/"+id+"?offset=13&limit=12", tok, nil, "Accept", "text/plain")
	if r.status != 200 || string(r.body) != "line one\nlin" || r.header.Get("X-Next-Offset") != "25" ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("text/plain: %d %q %v", r.status, r.body, r.header)
	}
	r = e.req("GET", "/api/monitor/logs/"+id, tok, nil, "Accept", "text/plain")
	if string(r.body) != text || r.header.Get("X-Next-Offset") != strconv.FormatInt(size, 10) {
		t.Fatalf("text/plain all: %q %v", r.body, r.header)
	}

	// Terminal run: the last line comes whole, and eof once the end is read.
	e.finish(id, core.StatusSucceeded)
	f("?offset=32", logAnswer{Content: []string{"last"}, Offset: 32, NextOffset: size, EOF: true})
	f("", logAnswer{Content: []string{"TRACE_ID:abc", "line one", "line two", "", "last"}, NextOffset: size, EOF: true})
	f("?limit=20", logAnswer{Content: []string{"TRACE_ID:abc"}, NextOffset: 13})

	// A finished run without a log file is at eof.
	id2 := e.submit(tok, `{"command":["a"]}`)
	e.finish(id2, core.StatusCancelled)
	r = e.req("GET", "/api/monitor/logs/"+id2, tok, nil)
	var a logAnswer
	mustJSON(t, r.body, &a)
	if !a.EOF || len(a.Content) != 0 || a.NextOffset != 0 {
		t.Fatalf("finished run without log: %s", r.body)
	}
}

func TestLogs_Failure(t *testing.T) {
	e := newEnv(t)
	tok, _ := e.user("alice")
	id := e.submit(tok, `{"command":["a"]}`)
	// A file a traversal would reach must never be served.
	if err := os.WriteFile(filepath.Join(filepath.Dir(e.logDir), "secret.log"), []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := func(path string, want int) {
		t.Helper()
		r := e.req("GET", path, tok, nil)
		if r.status != want {
			t.Fatalf("%s: want %d, got %d %s", path, want, r.status, r.body)
		}
		r.errCode(t)
		if strings.Contains(string(r.body), "secret") && !strings.Contains(path, "secret") {
			t.Fatalf("%s leaked a file: %s", path, r.body)
		}
	}
	f("/api/monitor/logs/..%2Fsecret", 400)
	f("/api/monitor/logs/..%2F..%2F..%2Fetc%2Fpasswd", 400)
	f("/api/monitor/logs/../secret", 400)
	f("/api/monitor/logs/..", 400)
	f("/api/monitor/logs/%00", 400)
	f("/api/monitor/logs/"+id+"%00", 400)
	f("/api/monitor/logs/"+strings.Repeat("x", 1000), 400)
	f("/api/monitor/logs/a.b", 400)
	f("/api/monitor/logs/a/b", 400)
	f("/api/monitor/logs/", 400)
	f("/api/monitor/logs/r-unknown", 404)
	f("/api/monitor/logs/"+id+"?offset=-1", 400)
	f("/api/monitor/logs/"+id+"?offset=x", 400)
	f("/api/monitor/logs/"+id+"?limit=0", 400)
	f("/api/monitor/logs/"+id+"?limit=1e3", 400)
	if r := e.req("GET", "/api/monitor/logs/"+id+"?limit=999999999", tok, nil); r.status != 200 {
		t.Fatalf("a limit over 8 MiB is clamped: %d %s", r.status, r.body)
	}
}
