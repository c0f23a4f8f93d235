package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/e2eutil"
)

const password = "a-long-password"

// api talks REST to the masters, as a user would: each request goes to one
// master, and the caller picks which.
type api struct {
	hc    *http.Client
	token string
}

func newAPI() *api {
	return &api{hc: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
}

type response struct {
	status int
	body   []byte
}

func (r response) String() string {
	s := string(r.body)
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return fmt.Sprintf("%d %s", r.status, s)
}

// do sends one request; body is nil or a value to marshal; hdr are
// name/value pairs.
func (a *api) do(method, base, path string, body any, hdr ...string) (response, error) {
	r, err := e2eutil.Do(a.hc, method, strings.TrimRight(base, "/")+path, a.token, body, hdr...)
	return response{status: r.Status, body: r.Body}, err
}

// signup registers the first user (an admin) and keeps its token.
func (a *api) signup(base, name string) error {
	r, err := a.do("POST", base, "/api/auth/register", map[string]string{"username": name, "password": password})
	if err != nil || r.status != 201 {
		return fmt.Errorf("cannot register %s: %v %v", name, r, err)
	}
	r, err = a.do("POST", base, "/api/auth/login", map[string]string{"username": name, "password": password})
	if err != nil || r.status != 200 {
		return fmt.Errorf("cannot log in as %s: %v %v", name, r, err)
	}
	var ans struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(r.body, &ans); err != nil || ans.Token == "" {
		return fmt.Errorf("login of %s answered %v", name, r)
	}
	a.token = ans.Token
	return nil
}

// taskView is the part of the API's Task the checker reads.
type taskView struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Attempt    int    `json:"attempt"`
	MaxRetries int    `json:"maxRetries"`
	Worker     string `json:"worker"`
	GPUIndices []int  `json:"gpuIndices"`
	TraceID    string `json:"traceId"`
	ExitCode   *int   `json:"exitCode"`
	Error      string `json:"error"`
}

func (tk taskView) String() string {
	ec := "null"
	if tk.ExitCode != nil {
		ec = fmt.Sprint(*tk.ExitCode)
	}
	return fmt.Sprintf("%s %s attempt %d/%d worker %q exit %s error %q", tk.ID, tk.Status, tk.Attempt,
		tk.MaxRetries+1, tk.Worker, ec, tk.Error)
}

// terminal are the statuses a run never leaves.
var terminal = map[string]bool{"SUCCEEDED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true}

// listAll reads every run through one master, page by page.
func (a *api) listAll(base string) ([]taskView, error) {
	var all []taskView
	cursor := ""
	for range 1000 {
		q := url.Values{"limit": {"500"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r, err := a.do("GET", base, "/api/tasks?"+q.Encode(), nil)
		if err != nil {
			return nil, err
		}
		if r.status != 200 {
			return nil, fmt.Errorf("GET /api/tasks: %v", r)
		}
		var page struct {
			Items      []taskView `json:"items"`
			NextCursor string     `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			return nil, fmt.Errorf("GET /api/tasks: %v in %v", err, r)
		}
		all = append(all, page.Items...)
		if page.NextCursor == "" || len(page.Items) == 0 {
			return all, nil
		}
		cursor = page.NextCursor
	}
	return nil, fmt.Errorf("GET /api/tasks: more than 1000 pages")
}

// logText reads a run's whole log raw (Accept: text/plain).
func (a *api) logText(base, id string) ([]byte, error) {
	var out []byte
	for range 64 {
		r, err := a.do("GET", base, fmt.Sprintf("/api/monitor/logs/%s?offset=%d&limit=1048576", id, len(out)), nil,
			"Accept", "text/plain")
		if err != nil {
			return nil, err
		}
		if r.status != 200 {
			return nil, fmt.Errorf("GET /api/monitor/logs/%s: %v", id, r)
		}
		if len(r.body) == 0 {
			return out, nil
		}
		out = append(out, r.body...)
	}
	return nil, fmt.Errorf("log of %s is over 64 MiB", id)
}
