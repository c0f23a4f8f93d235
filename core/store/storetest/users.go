package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
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

	dup := core.User{Username: "bob", PasswordHash: "x"}
	if err := s.CreateUser(ctx, &dup); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("CreateUser(duplicate bob): got %v, want ErrConflict", err)
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
				got.PasswordHash != want.PasswordHash || !got.CreatedAt.Equal(want.CreatedAt) {
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
