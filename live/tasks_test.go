package live

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

// TestPublishing_FeedsTheTasksTopic: the store's event publisher and the
// hub together, as the master wires them.
func TestPublishing_FeedsTheTasksTopic(t *testing.T) {
	h, _ := newTestHub(t, HubConfig{})
	st := store.Publishing(openSQLite(t), h)
	s := h.NewSubscriber(testViewer)
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

// TestTasksTopic_EnvOnlyForOwnerAndAdmins: /topic/tasks shows a run's env
// values to its owner and to admins, "***" to everyone else; each of the
// two encodings is shared by the subscribers that get it.
func TestTasksTopic_EnvOnlyForOwnerAndAdmins(t *testing.T) {
	h, _ := newTestHub(t, HubConfig{})
	owner := core.User{ID: 7, Username: "owner", Role: core.RoleUser}
	admin := core.User{ID: 8, Username: "boss", Role: core.RoleAdmin}
	other := core.User{ID: 9, Username: "other", Role: core.RoleUser}
	other2 := core.User{ID: 10, Username: "other2", Role: core.RoleUser}
	subs := map[string]*Subscriber{}
	for name, u := range map[string]core.User{"owner": owner, "admin": admin, "other": other, "other2": other2} {
		s := h.NewSubscriber(u)
		t.Cleanup(s.Close)
		if err := s.Subscribe(TopicTasks, SubscribeOptions{}); err != nil {
			t.Fatal(err)
		}
		expectOne(t, s, "subscribed", TopicTasks)
		subs[name] = s
	}
	h.TaskChanged(core.Task{ID: "r1", UserID: owner.ID, Env: map[string]string{"WANDB_API_KEY": "secret", "SEED": "1"}, Fence: 3})
	frames := map[string]hubFrame{}
	for name, s := range subs {
		frames[name] = expectOne(t, s, "task", TopicTasks)
	}
	for name, want := range map[string]map[string]string{
		"owner":  {"WANDB_API_KEY": "secret", "SEED": "1"},
		"admin":  {"WANDB_API_KEY": "secret", "SEED": "1"},
		"other":  {"WANDB_API_KEY": "***", "SEED": "***"},
		"other2": {"WANDB_API_KEY": "***", "SEED": "***"},
	} {
		var got struct {
			Env map[string]string `json:"env"`
		}
		if err := json.Unmarshal(frames[name].Data, &got); err != nil {
			t.Fatal(err)
		}
		if len(got.Env) != len(want) || got.Env["WANDB_API_KEY"] != want["WANDB_API_KEY"] || got.Env["SEED"] != want["SEED"] {
			t.Errorf("%s sees env %v, want %v", name, got.Env, want)
		}
		if bytes.Contains(frames[name].raw, []byte("fence")) {
			t.Errorf("%s sees the fence: %s", name, frames[name].raw)
		}
	}
	same := func(a, b string) bool { return &frames[a].raw[0] == &frames[b].raw[0] }
	if !same("owner", "admin") || !same("other", "other2") || same("owner", "other") {
		t.Error("the full and the masked event are not each encoded once and shared")
	}
}
