package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// client talks REST to a master, with the helpers of the e2e tests.
type client struct{ *rig.Client }

type (
	response = rig.Response
	userJSON = rig.User
)

func newClient(t testing.TB, base string) *client { return &client{rig.NewClient(t, base)} }

// as returns a client of the same server sending token.
func (c *client) as(token string) *client { return &client{c.As(token)} }

// login returns a client carrying name's token.
func (c *client) login(name string) *client { return &client{c.Login(name, rig.Password)} }

// signup registers and logs in a user; it checks the role the server gave.
func signup(t testing.TB, base, name, wantRole string) (*client, userJSON) {
	t.Helper()
	c, u := newClient(t, base).Signup(name)
	if u.Role != wantRole {
		t.Fatalf("user %s has role %s, want %s", name, u.Role, wantRole)
	}
	return &client{c}, u
}

// task is the API's Task, the fields the tests read.
type task struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	User        string   `json:"user"`
	UserID      int64    `json:"userId"`
	Status      string   `json:"status"`
	Attempt     int      `json:"attempt"`
	MaxRetries  int      `json:"maxRetries"`
	Command     []string `json:"command"`
	Worker      string   `json:"worker"`
	TraceID     string   `json:"traceId"`
	ExitCode    *int     `json:"exitCode"`
	Error       string   `json:"error"`
	FinalReward *float64 `json:"finalReward"`
}

func (tk task) String() string {
	ec := "null"
	if tk.ExitCode != nil {
		ec = fmt.Sprint(*tk.ExitCode)
	}
	return fmt.Sprintf("%s %s attempt %d worker %q exit %s error %q", tk.ID, tk.Status, tk.Attempt, tk.Worker, ec, tk.Error)
}

var terminal = map[string]bool{"SUCCEEDED": true, "FAILED": true, "CANCELLED": true, "TIMEOUT": true}

// submit posts a run and returns its id and trace id.
func (b *bed) submit(c *client, body any) (id, traceID string) {
	b.T.Helper()
	var ans struct {
		ID      string `json:"id"`
		Status  string `json:"status"`
		TraceID string `json:"traceId"`
	}
	r := c.Must("POST", "/api/train", body, 202, &ans)
	if ans.ID == "" || ans.Status != "QUEUED" || ans.TraceID == "" {
		b.T.Fatalf("POST /api/train: got %s", r)
	}
	if h := r.Header.Get("X-Trace-Id"); h != ans.TraceID {
		b.T.Fatalf("POST /api/train: traceId %q differs from X-Trace-Id %q", ans.TraceID, h)
	}
	b.track(ans.ID)
	return ans.ID, ans.TraceID
}

// getTask reads a run; errors (a restarting master) are returned, not fatal.
func (c *client) getTask(id string) (task, error) {
	var tk task
	r, err := c.Do("GET", "/api/tasks/"+id, nil)
	if err != nil {
		return tk, err
	}
	if r.Status != 200 {
		return tk, fmt.Errorf("GET /api/tasks/%s: %s", id, r)
	}
	return tk, json.Unmarshal(r.Body, &tk)
}

// waitTask polls a run until cond holds; it fails at once when the run ends
// in a state cond does not accept.
func (c *client) waitTask(id string, timeout time.Duration, what string, cond func(task) bool) task {
	c.T.Helper()
	var tk task
	testutil.Eventually(c.T, timeout, func() (bool, string) {
		var err error
		tk, err = c.getTask(id)
		if err != nil {
			return false, err.Error()
		}
		if cond(tk) {
			return true, ""
		}
		if terminal[tk.Status] {
			c.T.Fatalf("run ended as %v; wanted %s", tk, what)
		}
		return false, fmt.Sprintf("run is %v; want %s", tk, what)
	})
	return tk
}

// waitStatus waits until the run has status st.
func (c *client) waitStatus(id, st string, timeout time.Duration) task {
	c.T.Helper()
	return c.waitTask(id, timeout, st, func(tk task) bool { return tk.Status == st })
}

// logText reads a run's whole log through REST as raw bytes (Accept: text/plain).
func (c *client) logText(id string) (string, error) {
	r, err := c.Do("GET", "/api/monitor/logs/"+id+"?offset=0&limit=8388608", nil, "Accept", "text/plain")
	if err != nil {
		return "", err
	}
	if r.Status != 200 {
		return "", fmt.Errorf("GET logs of %s: %s", id, r)
	}
	return string(r.Body), nil
}

// waitLogContains waits until the run's log holds s.
func (c *client) waitLogContains(id, s string, timeout time.Duration) {
	c.T.Helper()
	testutil.Eventually(c.T, timeout, func() (bool, string) {
		text, err := c.logText(id)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(text, s), fmt.Sprintf("log of %s lacks %q; it is:\n%s", id, s, rig.Tail(text, 20))
	})
}

// logFile reads LOG_DIR/<id>.log of a master's data dir.
func logFile(t testing.TB, dataDir, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "logs", id+".log"))
	if err != nil {
		t.Fatalf("cannot read the run's log file: %v", err)
	}
	return string(b)
}

// errorBody is API.md's error shape.
type errorBody struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		TraceID string `json:"traceId"`
	} `json:"error"`
}

var snakeCase = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// checkError verifies an answer is status want with API.md's error body
// and a trace id matching X-Trace-Id; it returns the code. want 0 accepts
// any 4xx.
func checkError(t testing.TB, what string, r response, want int, wantCode string) string {
	t.Helper()
	if want == 0 && (r.Status < 400 || r.Status > 499) {
		t.Errorf("%s: got %s, want a 4xx", what, r)
	} else if want != 0 && r.Status != want {
		t.Errorf("%s: got %s, want status %d", what, r, want)
	}
	if r.Status >= 500 {
		t.Errorf("%s: server error %s", what, r)
	}
	var e errorBody
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Error == nil {
		t.Errorf("%s: body is not the API error shape: %s", what, r)
		return ""
	}
	if !snakeCase.MatchString(e.Error.Code) || e.Error.Message == "" || e.Error.TraceID == "" {
		t.Errorf("%s: incomplete error body: %s", what, r)
	}
	if wantCode != "" && e.Error.Code != wantCode {
		t.Errorf("%s: error code %q, want %q (%s)", what, e.Error.Code, wantCode, r)
	}
	if h := r.Header.Get("X-Trace-Id"); h != e.Error.TraceID {
		t.Errorf("%s: error traceId %q differs from X-Trace-Id %q", what, e.Error.TraceID, h)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	return e.Error.Code
}
