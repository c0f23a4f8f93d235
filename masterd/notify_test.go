package masterd

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestNotifyFailedRun: a user's webhook (a real local receiver, allowed by
// NOTIFY_ALLOW_HOSTS) gets a POST when their run fails on a real worker,
// with the run's name, status and link.
func TestNotifyFailedRun(t *testing.T) {
	got := make(chan []byte, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	t.Cleanup(rcv.Close)
	m := start(t, Config{NotifyAllowHosts: "127.0.0.1", PublicURL: "https://rlsched.lab.example"})
	join(t, m, "w1")
	call(t, m, "POST", "/api/auth/register", "", map[string]string{"username": "alice", "password": "a-long-password"}, nil, 201)
	var login struct {
		Token string `json:"token"`
	}
	call(t, m, "POST", "/api/auth/login", "", map[string]string{"username": "alice", "password": "a-long-password"}, &login, 200)
	call(t, m, "PUT", "/api/auth/me/notifications", login.Token, map[string]any{"webhook": rcv.URL + "/hook", "on": []string{"FAILED"}}, nil, 200)
	var sub struct {
		ID string `json:"id"`
	}
	call(t, m, "POST", "/api/train", login.Token, map[string]any{"name": "doomed", "command": []string{"false"}}, &sub, 202)
	var body []byte
	select {
	case body = <-got:
	case <-time.After(time.Minute):
		t.Fatal("no notification within a minute of submitting a failing run")
	}
	var n struct {
		Text string `json:"text"`
		Run  struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"run"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		t.Fatalf("notification %s: %v", body, err)
	}
	if n.Run.ID != sub.ID || n.Run.Status != "FAILED" ||
		!strings.Contains(n.Text, "<https://rlsched.lab.example/runs/"+sub.ID+"|doomed> FAILED") {
		t.Fatalf("notification %s", body)
	}
}
