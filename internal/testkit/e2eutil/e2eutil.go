// Package e2eutil holds what the end-to-end tests (package e2e) and the
// chaos tests (e2e/chaos) share about the rlsched processes they start:
// the environment a server gets, reading its JSON log, and one REST
// request. Each package keeps its own harness (processes, clients) on top.
package e2eutil

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// serverSettings are the variables rlsched reads that a test's own
// environment must not pass on to the processes it starts.
var serverSettings = []string{"JWT_SECRET", "WORKER_JOIN_TOKEN", "MASTER_PORT", "RPC_PORT", "GATEWAY_PORT",
	"SQLITE_PATH", "LOG_DIR", "MYSQL_DSN", "REDIS_ADDR", "REDIS_PREFIX", "ARTIFACT_DIR", "LOG_FORMAT",
	"LOG_LEVEL", "WORKER_HB_TTL_SECONDS", "WORKER_TASK_TTL_SECONDS", "NACOS_ADDR", "SERVICE_NAME"}

// ServerEnv is the test's environment minus every setting rlsched reads
// (and every variable named RLSCHED_… or starting with one of
// dropPrefixes), plus JSON logs at info, then extra: later entries win in
// exec.
func ServerEnv(dropPrefixes []string, extra ...string) []string {
	drop := map[string]bool{}
	for _, k := range serverSettings {
		drop[k] = true
	}
	prefixes := append([]string{"RLSCHED_"}, dropPrefixes...)
	var env []string
next:
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if drop[k] {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	env = append(env, "LOG_FORMAT=json", "LOG_LEVEL=info")
	return append(env, extra...)
}

// ParseLog parses the complete JSON lines of a process's log file (a last
// line still being written is left out); other lines (the guard's, a
// panic) are skipped. A file that cannot be read has none.
func ParseLog(path string) []map[string]any {
	data, _ := os.ReadFile(path)
	i := bytes.LastIndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data[:i+1]))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l map[string]any
		if json.Unmarshal(line, &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// Str is field k of log line l as text ("" when absent).
func Str(l map[string]any, k string) string {
	switch v := l[k].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// Tail is the last lines of s.
func Tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// Response is a REST answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends one REST request to url with hc: body is nil, []byte, string
// or a value to marshal as JSON; token, when set, is sent as a bearer
// token; hdr are header name/value pairs.
func Do(hc *http.Client, method, url, token string, body any, hdr ...string) (Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}
