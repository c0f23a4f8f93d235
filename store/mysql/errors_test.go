package mysql

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testsvc"
)

// TestServerDownIsUnavailable stops a private MariaDB under an open store:
// calls fail with core.ErrUnavailable (so the API answers 503 and the
// dispatcher retries) and work again once the server is back, without
// reopening the store.
func TestServerDownIsUnavailable(t *testing.T) {
	t.Parallel()
	mdb := testsvc.StartMariaDB(t)
	s, err := Open(mdb.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.Task(ctx, "r-none"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Task of a missing run: %v; want ErrNotFound", err)
	}

	mdb.Stop()
	if _, err := s.Task(ctx, "r-none"); !errors.Is(err, core.ErrUnavailable) {
		t.Errorf("Task while the server is down: %v; want ErrUnavailable", err)
	}
	if _, err := s.QueuedTasks(ctx, 10); !errors.Is(err, core.ErrUnavailable) {
		t.Errorf("QueuedTasks while the server is down: %v; want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, core.ErrUnavailable) {
		t.Errorf("Ping while the server is down: %v; want ErrUnavailable", err)
	}

	mdb.Start()
	if _, err := s.Task(ctx, "r-none"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("Task after the server came back: %v; want ErrNotFound", err)
	}
}

// TestCallerCancelIsNotUnavailable: a caller's own deadline is not the
// server's fault.
func TestCallerCancelIsNotUnavailable(t *testing.T) {
	t.Parallel()
	mdb := testsvc.StartMariaDB(t)
	s, err := Open(mdb.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Task(ctx, "r-none"); err == nil || errors.Is(err, core.ErrUnavailable) {
		t.Errorf("Task with a cancelled context: %v; want an error that is not ErrUnavailable", err)
	}
}
