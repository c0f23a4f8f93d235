package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// api talks REST to the masters, as a user would: each request goes to one
// master, and the caller picks which.
type api struct {
	hc    *http.Client
	token string // the admin's, once startWorld signed up
}

func newAPI() *api {
	return &api{hc: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
}

type response = rig.Response

// do sends one request (see rig.Do) to the master at base.
func (a *api) do(method, base, path string, body any, hdr ...string) (response, error) {
	return rig.Do(a.hc, method, strings.TrimRight(base, "/")+path, a.token, body, hdr...)
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
		if r.Status != 200 {
			return nil, fmt.Errorf("GET /api/tasks: %v", r)
		}
		var page struct {
			Items      []taskView `json:"items"`
			NextCursor string     `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
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
		if r.Status != 200 {
			return nil, fmt.Errorf("GET /api/monitor/logs/%s: %v", id, r)
		}
		if len(r.Body) == 0 {
			return out, nil
		}
		out = append(out, r.Body...)
	}
	return nil, fmt.Errorf("log of %s is over 64 MiB", id)
}
