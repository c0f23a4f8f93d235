package live

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/sqlite"
)

// TestPublishing_FeedsTheTasksTopic: the store's event publisher and the
// hub together, as the master wires them.
func TestPublishing_FeedsTheTasksTopic(t *testing.T) {
	h, _ := newTestHub(t, HubConfig{})
	st := store.Publishing(openSQLite(t), h)
	s := h.NewSubscriber()
	t.Cleanup(s.Close)
	if err := s.Subscribe(TopicTasks, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	expectOne(t, s, "subscribed", TopicTasks)
	ctx := context.Background()
	u := core.User{Username: "bob", PasswordHash: "x"}
	if err := st.CreateUser(ctx, &u); err != nil {
		t.Fatal(err)
	}
	task := core.Task{UserID: u.ID, Command: []string{"true"}}
	if err := st.CreateTask(ctx, &task); err != nil {
		t.Fatal(err)
	}
	f := expectOne(t, s, "task", TopicTasks)
	var data core.Task
	if err := json.Unmarshal(f.Data, &data); err != nil || data.ID != task.ID || data.User != "bob" {
		t.Fatalf("task frame: %s", f.raw)
	}
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "rlsched.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
