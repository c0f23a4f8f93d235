package naive

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// REST is the reference for POST /api/train: net/http, a JSON body, and the
// same durable insert (store.CreateTask on the SQLite backend, answered after
// commit). It skips what the real API adds around the insert: JWT
// verification, the user lookup, spec validation and the access log.
type REST struct {
	st     store.Store
	userID int64
}

// NewREST serves submissions owned by userID into st.
func NewREST(st store.Store, userID int64) *REST { return &REST{st: st, userID: userID} }

type submitBody struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
}

func (s *REST) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/api/train" {
		http.Error(rw, "POST /api/train", http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var b submitBody
	if err != nil || json.Unmarshal(body, &b) != nil || len(b.Command) == 0 {
		http.Error(rw, "bad body", http.StatusBadRequest)
		return
	}
	t := core.Task{ID: core.NewTaskID(), Name: b.Name, UserID: s.userID, Status: core.StatusQueued, Attempt: 1,
		MaxRetries: 1, Command: b.Command, Env: map[string]string{}, Tags: []string{}, TraceID: core.NewTraceID()}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := s.st.CreateTask(ctx, &t); err != nil {
		http.Error(rw, err.Error(), http.StatusServiceUnavailable)
		return
	}
	rw.Header().Set("Content-Type", "application/json; charset=utf-8")
	rw.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(rw).Encode(map[string]any{"id": t.ID, "status": t.Status, "traceId": t.TraceID})
}
