package scripts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// compareProg checks Client.compare's query against a stand-in master:
// by and task as param.NAME, lists joined by commas, improve as A:B, the
// filters of runs() beside them; and the answer handed back as it came.
const compareProg = `
import http.server, json, sys, threading, urllib.parse, rlsched

def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)

answer = {"groups": [{"key": {"lr": 0.001}, "name": "0.001", "n": 10,
                      "stats": {"iqm": {"value": 1.5, "ci": [1.0, 2.0]}}}],
          "improvement": {"a": "0.001", "b": "0.01", "value": 0.75, "ci": [0.5, 0.9]}}
seen = []
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        seen.append(self.path)
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
c = rlsched.Client("http://127.0.0.1:%d" % srv.server_address[1], token="t")

got = c.compare(sweep="s1", by=["lr", "param.batch"], task="env", metric="episode_reward", stat=["iqm", "mean"],
                reps=500, ci=0.9, seed=7, profile=[0.5, 1.0], improve=("0.001", "0.01"), normalize="minmax", min=-1, max=0)
check(got == answer, "answer: %r" % (got,))
path, _, query = seen[-1].partition("?")
q = dict(urllib.parse.parse_qsl(query))
check(path == "/api/compare", "path: " + path)
want = {"sweep": "s1", "by": "param.lr,param.batch", "task": "param.env", "metric": "episode_reward", "stat": "iqm,mean",
        "reps": "500", "ci": "0.9", "seed": "7", "profile": "0.5,1.0", "improve": "0.001:0.01", "normalize": "minmax",
        "min": "-1", "max": "0"}
check(q == want, "query: %r" % (q,))

c.compare(tag="paper", params={"algo": "PPO"}, by="lr,batch", created_after="2026-01-01T00:00:00Z", improve="a:b")
q = dict(urllib.parse.parse_qsl(seen[-1].partition("?")[2]))
check(q == {"tag": "paper", "param.algo": "PPO", "by": "param.lr,param.batch", "createdAfter": "2026-01-01T00:00:00Z", "improve": "a:b"},
      "filters: %r" % (q,))
print("OK")
`

func TestClientCompare(t *testing.T) {
	t.Parallel()
	dir := filepath.Dir(scriptPath(t, "rlsched.py"))
	env := append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH="+dir)
	r := runPy(t, env, "-c", compareProg)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "OK" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}
