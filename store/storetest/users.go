package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

func testUsers(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.UserByName(ctx, "alice"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UserByName on empty store: got %v, want ErrNotFound", err)
	}
	if _, err := s.UserByID(ctx, 1); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UserByID on empty store: got %v, want ErrNotFound", err)
	}

	create := func(name string, role, want core.Role) core.User {
		t.Helper()
		u := core.User{Username: name, Role: role, PasswordHash: "$2a$10$" + name}
		if err := s.CreateUser(ctx, &u); err != nil {
			t.Fatalf("CreateUser(%s): %v", name, err)
		}
		if u.ID == 0 || u.CreatedAt.IsZero() || u.Role != want {
			t.Fatalf("CreateUser(%s, %q): got id %d createdAt %v role %q, want an id, a time and role %q",
				name, role, u.ID, u.CreatedAt, u.Role, want)
		}
		return u
	}
	alice := create("alice", core.RoleUser, core.RoleAdmin) // first user: admin whatever asked
	bob := create("bob", "", core.RoleUser)
	carol := create("carol", core.RoleAdmin, core.RoleAdmin)
	if alice.ID == bob.ID || bob.ID == carol.ID {
		t.Fatalf("ids not distinct: %d %d %d", alice.ID, bob.ID, carol.ID)
	}

	// Names that differ only in case are one name (issue 25).
	for _, name := range []string{"bob", "Bob", "BOB"} {
		dup := core.User{Username: name, PasswordHash: "x"}
		if err := s.CreateUser(ctx, &dup); !errors.Is(err, core.ErrConflict) {
			t.Fatalf("CreateUser(%s beside bob): got %v, want ErrConflict", name, err)
		}
	}
	for _, name := range []string{"...", "-bob", "bob.", "_x_"} {
		odd := core.User{Username: name, PasswordHash: "x"}
		if err := s.CreateUser(ctx, &odd); err == nil || errors.Is(err, core.ErrConflict) {
			t.Fatalf("CreateUser(%q): got %v, want a refused name", name, err)
		}
	}

	for _, want := range []core.User{alice, bob, carol} {
		byName, err := s.UserByName(ctx, want.Username)
		if err != nil {
			t.Fatalf("UserByName(%s): %v", want.Username, err)
		}
		byID, err := s.UserByID(ctx, want.ID)
		if err != nil {
			t.Fatalf("UserByID(%d): %v", want.ID, err)
		}
		for _, got := range []core.User{byName, byID} {
			if got.ID != want.ID || got.Username != want.Username || got.Role != want.Role ||
				got.PasswordHash != want.PasswordHash || !got.CreatedAt.Equal(want.CreatedAt) || got.TokenVersion != 0 {
				t.Fatalf("lookup of %s: got %+v, want %+v", want.Username, got, want)
			}
		}
	}
	if _, err := s.UserByName(ctx, "dave"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UserByName(dave): got %v, want ErrNotFound", err)
	}
	if _, err := s.UserByID(ctx, carol.ID+100); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UserByID(unknown): got %v, want ErrNotFound", err)
	}
}

// testTokenVersion: a new user's version is 0; BumpTokenVersion raises it
// by one and returns it; UpdateUser raises it only when the role changes;
// both refuse an unknown user; concurrent bumps are all counted.
func testTokenVersion(t *testing.T, s store.Store) {
	ctx := t.Context()
	u := core.User{Username: "alice", PasswordHash: "x"}
	other := core.User{Username: "bob", PasswordHash: "x"}
	for _, p := range []*core.User{&u, &other} {
		if err := s.CreateUser(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	version := func(id int64) (int64, core.Role) {
		t.Helper()
		got, err := s.UserByID(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		byName, err := s.UserByName(ctx, got.Username)
		if err != nil || byName.TokenVersion != got.TokenVersion {
			t.Fatalf("UserByName's version %d differs from UserByID's %d (%v)", byName.TokenVersion, got.TokenVersion, err)
		}
		return got.TokenVersion, got.Role
	}
	if v, _ := version(u.ID); v != 0 {
		t.Fatalf("new user at version %d, want 0", v)
	}
	for want := int64(1); want <= 2; want++ {
		got, err := s.BumpTokenVersion(ctx, u.ID)
		if err != nil || got != want {
			t.Fatalf("BumpTokenVersion: %d, %v; want %d", got, err, want)
		}
		if v, _ := version(u.ID); v != want {
			t.Fatalf("after a bump: version %d, want %d", v, want)
		}
	}
	if v, _ := version(other.ID); v != 0 {
		t.Fatalf("another user's version moved to %d", v)
	}
	setRole := func(id int64, r core.Role) error {
		_, err := s.UpdateUser(ctx, id, store.UserPatch{Role: &r})
		return err
	}
	if err := setRole(other.ID, core.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if v, r := version(other.ID); v != 1 || r != core.RoleAdmin {
		t.Fatalf("after a role change: version %d role %s, want 1 ADMIN", v, r)
	}
	if err := setRole(other.ID, core.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if v, _ := version(other.ID); v != 1 {
		t.Fatalf("setting the same role bumped the version to %d", v)
	}
	if err := setRole(other.ID, "ROOT"); err == nil {
		t.Fatal("UpdateUser took an unknown role")
	}
	if _, err := s.BumpTokenVersion(ctx, other.ID+100); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("BumpTokenVersion(unknown): %v, want ErrNotFound", err)
	}
	if err := setRole(other.ID+100, core.RoleUser); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("UpdateUser(unknown): %v, want ErrNotFound", err)
	}
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := s.BumpTokenVersion(ctx, u.ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if v, _ := version(u.ID); v != 2+n {
		t.Fatalf("after %d concurrent bumps: version %d, want %d", n, v, 2+n)
	}
}

// testFirstUserRace: users created at once on an empty store; exactly one
// becomes admin.
func testFirstUserRace(t *testing.T, s store.Store) {
	const n = 10
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			u := core.User{Username: fmt.Sprintf("racer%02d", i), PasswordHash: "x"}
			errs[i] = s.CreateUser(t.Context(), &u)
		})
	}
	wg.Wait()
	admins := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("CreateUser(racer%02d): %v", i, errs[i])
		}
		u, err := s.UserByName(t.Context(), fmt.Sprintf("racer%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		if u.Role == core.RoleAdmin {
			admins++
		}
	}
	if admins != 1 {
		t.Fatalf("got %d admins among %d first users, want 1", admins, n)
	}
}

func testPingKind(t *testing.T, s store.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if k := s.Kind(); k != "sqlite" && k != "mysql" {
		t.Fatalf("Kind: got %q, want sqlite or mysql", k)
	}
}
