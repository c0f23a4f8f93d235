package storetest

import (
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// testUserAdmin: UpdateUser changes role, disabled and the password hash,
// returns the user as stored, and raises the token version when a role
// changes, the user is disabled or the password changes (not on enabling
// or on a no-op); RecordLogin sets the last sign-in.
func testUserAdmin(t *testing.T, s store.Store) {
	ctx := t.Context()
	admin := mustUser(t, s, "alice") // first: ADMIN
	bob := mustUser(t, s, "bob")
	if bob.Disabled || bob.LastLoginAt != nil {
		t.Fatalf("a new user: %+v", bob)
	}
	f := func(p store.UserPatch, version int64, check func(core.User) bool) {
		t.Helper()
		got, err := s.UpdateUser(ctx, bob.ID, p)
		if err != nil {
			t.Fatalf("UpdateUser(%+v): %v", p, err)
		}
		read, err := s.UserByID(ctx, bob.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range []core.User{got, read} {
			if u.TokenVersion != version || !check(u) || u.Username != "bob" {
				t.Fatalf("after UpdateUser(%+v): %+v, want version %d", p, u, version)
			}
		}
	}
	f(store.UserPatch{}, 0, func(u core.User) bool { return u.Role == core.RoleUser && !u.Disabled })
	f(store.UserPatch{Role: ptr(core.RoleAdmin)}, 1, func(u core.User) bool { return u.Role == core.RoleAdmin })
	f(store.UserPatch{Disabled: ptr(true)}, 2, func(u core.User) bool { return u.Disabled && u.Role == core.RoleAdmin })
	f(store.UserPatch{Disabled: ptr(true)}, 2, func(u core.User) bool { return u.Disabled })
	f(store.UserPatch{Disabled: ptr(false)}, 2, func(u core.User) bool { return !u.Disabled })
	f(store.UserPatch{PasswordHash: ptr("$2a$new")}, 3, func(u core.User) bool { return u.PasswordHash == "$2a$new" })
	f(store.UserPatch{Role: ptr(core.RoleUser), Disabled: ptr(true), PasswordHash: ptr("$2a$newer")}, 4,
		func(u core.User) bool { return u.Role == core.RoleUser && u.Disabled && u.PasswordHash == "$2a$newer" })
	if _, err := s.UpdateUser(ctx, bob.ID, store.UserPatch{Role: ptr(core.Role("ROOT"))}); err == nil {
		t.Fatal("UpdateUser took an unknown role")
	}
	if _, err := s.UpdateUser(ctx, bob.ID, store.UserPatch{PasswordHash: ptr("")}); err == nil {
		t.Fatal("UpdateUser took an empty password hash")
	}
	if _, err := s.UpdateUser(ctx, bob.ID+100, store.UserPatch{Disabled: ptr(true)}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UpdateUser(unknown): %v, want ErrNotFound", err)
	}

	when := base.Add(90 * time.Minute)
	if err := s.RecordLogin(ctx, admin.ID, when); err != nil {
		t.Fatal(err)
	}
	got, err := s.UserByName(ctx, "alice")
	if err != nil || got.LastLoginAt == nil || !got.LastLoginAt.Equal(when) || got.TokenVersion != 0 {
		t.Fatalf("after RecordLogin: %+v, %v", got, err)
	}
	if err := s.RecordLogin(ctx, bob.ID+100, when); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("RecordLogin(unknown): %v, want ErrNotFound", err)
	}
}

// testLastAdmin: the last enabled admin cannot be demoted, disabled or
// deleted, also by changes of two admins at once.
func testLastAdmin(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice := mustUser(t, s, "alice") // ADMIN
	bob := mustUser(t, s, "bob")
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrLastAdmin) {
			t.Fatalf("%s of the last admin: %v, want ErrLastAdmin", what, err)
		}
	}
	_, err := s.UpdateUser(ctx, alice.ID, store.UserPatch{Role: ptr(core.RoleUser)})
	refused("demotion", err)
	_, err = s.UpdateUser(ctx, alice.ID, store.UserPatch{Disabled: ptr(true)})
	refused("disabling", err)
	refused("deletion", s.DeleteUser(ctx, alice.ID))
	if u, _ := s.UserByID(ctx, alice.ID); u.Role != core.RoleAdmin || u.Disabled || u.TokenVersion != 0 {
		t.Fatalf("a refused change wrote: %+v", u)
	}
	// A disabled admin does not count.
	if _, err := s.UpdateUser(ctx, bob.ID, store.UserPatch{Role: ptr(core.RoleAdmin), Disabled: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	_, err = s.UpdateUser(ctx, alice.ID, store.UserPatch{Disabled: ptr(true)})
	refused("disabling beside a disabled admin", err)
	if _, err := s.UpdateUser(ctx, bob.ID, store.UserPatch{Disabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	// Two admins, each disabled at once: one change must lose.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, id := range []int64{alice.ID, bob.ID} {
		wg.Go(func() { _, errs[i] = s.UpdateUser(ctx, id, store.UserPatch{Disabled: ptr(true)}) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok != 1 {
		t.Fatalf("disabling both admins at once: %v; want exactly one to succeed", errs)
	}
	us, err := s.ListUsers(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	enabled := 0
	for _, u := range us {
		if u.Role == core.RoleAdmin && !u.Disabled {
			enabled++
		}
	}
	if enabled != 1 {
		t.Fatalf("%d enabled admins left, want 1: %+v", enabled, us)
	}
}

// testDeletedUserRuns: a deleted user is gone by name, cannot be changed
// or deleted again, its tokens are revoked, its name is free, and its runs
// stay, owned by core.DeletedUsername.
func testDeletedUserRuns(t *testing.T, s store.Store) {
	ctx := t.Context()
	mustUser(t, s, "alice")
	bob := mustUser(t, s, "bob")
	mustTask(t, s, bob, "r1", 0, at(0))
	if err := s.SetNotify(ctx, bob.ID, core.Notify{Webhook: "https://hooks.example.com/x", On: []string{"FAILED"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUser(ctx, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UserByName(ctx, "bob"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UserByName(deleted bob): %v, want ErrNotFound", err)
	}
	gone, err := s.UserByID(ctx, bob.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !gone.Deleted || !gone.Disabled || gone.PasswordHash != "" || gone.TokenVersion != 1 ||
		gone.Username != core.DeletedUsername(bob.ID) || gone.Notify.Webhook != "" || core.ValidUsername(gone.Username) {
		t.Fatalf("the deleted user's row: %+v", gone)
	}
	if r := mustGet(t, s, "r1"); r.User != core.DeletedUsername(bob.ID) || r.UserID != bob.ID {
		t.Fatalf("the deleted user's run: owner %q (%d)", r.User, r.UserID)
	}
	if err := s.DeleteUser(ctx, bob.ID); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("deleting twice: %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateUser(ctx, bob.ID, store.UserPatch{Disabled: ptr(false)}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("enabling a deleted user: %v, want ErrNotFound", err)
	}
	if err := s.SetNotify(ctx, bob.ID, core.Notify{Webhook: "https://x.example.com"}); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetNotify of a deleted user: %v, want ErrNotFound", err)
	}
	us, err := s.ListUsers(ctx, base)
	if err != nil || len(us) != 1 || us[0].Username != "alice" {
		t.Fatalf("ListUsers after a deletion: %+v, %v", us, err)
	}
	again := mustUser(t, s, "bob") // the name and its fold are free again
	if again.ID == bob.ID || again.Role != core.RoleUser {
		t.Fatalf("a new bob: %+v", again)
	}
	if ts, _, err := s.ListTasks(ctx, store.Filter{User: "bob"}); err != nil || len(ts) != 0 {
		t.Fatalf("the new bob owns %v (%v)", ids(ts), err)
	}
}

// testUserSummaries: ListUsers counts each user's runs, the active ones,
// and GPU-seconds of started runs (running ones until now).
func testUserSummaries(t *testing.T, s store.Store) {
	ctx := t.Context()
	alice := mustUser(t, s, "alice")
	bob := mustUser(t, s, "bob")
	mustUser(t, s, "carol")
	mk := func(u core.User, id string, gpus int, st core.Status, started, finished *time.Time) {
		t.Helper()
		tk := core.Task{ID: id, UserID: u.ID, GPUs: gpus, CreatedAt: at(0), Command: []string{"x"}}
		if err := s.CreateTask(ctx, &tk); err != nil {
			t.Fatal(err)
		}
		if st == core.StatusQueued {
			return
		}
		exp := store.Expect{Status: core.StatusQueued}
		tk.Status, tk.StartedAt, tk.FinishedAt, tk.Fence = st, started, finished, 1
		if err := s.UpdateTask(ctx, &tk, exp); err != nil {
			t.Fatal(err)
		}
	}
	mk(alice, "a1", 2, core.StatusSucceeded, ptr(at(0)), ptr(at(100*time.Second))) // 200
	mk(alice, "a2", 1, core.StatusRunning, ptr(at(50*time.Second)), nil)           // until now: 50
	mk(alice, "a3", 4, core.StatusQueued, nil, nil)                                // 0
	mk(bob, "b1", 0, core.StatusFailed, ptr(at(0)), ptr(at(time.Hour)))            // CPU only: 0
	mk(bob, "b2", 1, core.StatusDispatched, nil, nil)                              // not started: 0
	us, err := s.ListUsers(ctx, at(100*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(us))
	for i, u := range us {
		names[i] = u.Username
	}
	if !slices.Equal(names, []string{"alice", "bob", "carol"}) {
		t.Fatalf("ListUsers order: %v, want by id", names)
	}
	want := []struct {
		runs, active int
		gpuSeconds   float64
	}{{3, 1, 250}, {2, 1, 0}, {0, 0, 0}}
	for i, w := range want {
		u := us[i]
		if u.Runs != w.runs || u.ActiveRuns != w.active || math.Abs(u.GPUSeconds-w.gpuSeconds) > 1e-6 {
			t.Errorf("%s: runs %d active %d gpuSeconds %v; want %d %d %v", u.Username, u.Runs, u.ActiveRuns, u.GPUSeconds,
				w.runs, w.active, w.gpuSeconds)
		}
	}
	if us[0].Role != core.RoleAdmin || us[0].PasswordHash != "hash-alice" || !us[0].CreatedAt.Equal(alice.CreatedAt) {
		t.Errorf("alice as listed: %+v", us[0].User)
	}
}

// testNotify: SetNotify replaces the settings, UserByID and UserByName
// read them back, an empty webhook clears them.
func testNotify(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := mustUser(t, s, "alice")
	read := func() core.Notify {
		t.Helper()
		got, err := s.UserByID(ctx, u.ID)
		if err != nil {
			t.Fatal(err)
		}
		byName, err := s.UserByName(ctx, "alice")
		if err != nil || byName.Notify.Webhook != got.Notify.Webhook || !slices.Equal(byName.Notify.On, got.Notify.On) {
			t.Fatalf("UserByName's settings %+v differ from UserByID's %+v (%v)", byName.Notify, got.Notify, err)
		}
		return got.Notify
	}
	if n := read(); n.Webhook != "" || len(n.On) != 0 {
		t.Fatalf("a new user's settings: %+v", n)
	}
	n := core.Notify{Webhook: "https://hooks.example.com/services/T0/B0/x", On: []string{"FAILED", "TIMEOUT", "idle_gpu"}}
	if err := s.SetNotify(ctx, u.ID, n); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Webhook != n.Webhook || !slices.Equal(got.On, n.On) {
		t.Fatalf("settings read back: %+v, want %+v", got, n)
	}
	if err := s.SetNotify(ctx, u.ID, n); err != nil {
		t.Fatalf("setting the same again: %v", err)
	}
	if err := s.SetNotify(ctx, u.ID, core.Notify{}); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Webhook != "" || len(got.On) != 0 {
		t.Fatalf("after clearing: %+v", got)
	}
	if err := s.SetNotify(ctx, u.ID, core.Notify{Webhook: "https://x", On: []string{"A,B"}}); err == nil {
		t.Fatal("SetNotify took an event with a comma")
	}
	if err := s.SetNotify(ctx, u.ID+100, n); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("SetNotify(unknown): %v, want ErrNotFound", err)
	}
}
